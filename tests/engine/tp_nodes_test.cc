// Tensor parallelism over several nodes on the CPU: node 0 and a worker node
// (each a TpExecutor, here in one process on loopback) met through
// comm::rendezvous. Node 0 sends each step, the worker follows; the tcp links
// sum in the thread communicator's order, so the logits must equal the same
// tp in one process bit for bit, and the greedy tokens the golden ones. A
// rank that fails on the worker fails node 0's step with that rank's error
// and breaks the group (every later step says so); node 0's end stops the
// worker cleanly.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "../test_paths.h"
#include "comm/tcp_rendezvous.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "engine/step_message.h"
#include "engine/tp_executor.h"
#include "model/forward_batch.h"
#include "model/shard.h"
#include "model/loader/hf_config.h"
#include "model/transformer.h"

namespace tessera {
namespace {

constexpr int64_t kBlockSize = 4;

// `ids` at positions start.., the blocks it needs, logits of every row or the last.
model::ForwardBatch step(const std::vector<int32_t>& ids, int32_t start, bool all_rows) {
  return model::sequence_batch(ids, start, kBlockSize, all_rows ? static_cast<int64_t>(ids.size()) : 1);
}

engine::TpExecutorConfig executor_config(int tp, int64_t num_blocks, std::chrono::milliseconds timeout) {
  engine::TpExecutorConfig config;
  config.tp = tp;
  config.num_blocks = num_blocks;
  config.block_size = kBlockSize;
  config.comm_timeout = timeout;
  return config;
}

// Node 0's executor, with node 1 following on a thread of its own.
class TwoNodes {
 public:
  TwoNodes(const model::HostModel& model, int tp, int64_t num_blocks, std::function<void(int)> worker_hook = {},
           std::chrono::milliseconds timeout = std::chrono::minutes(2)) {
    comm::TcpListener listener(0);
    auto options = [&](int node) {
      comm::RendezvousOptions o;
      o.master_port = listener.port();
      o.nnodes = 2;
      o.node_rank = node;
      o.world_size = tp;
      o.fingerprint = "test model";
      o.offer = num_blocks;
      o.timeout = std::chrono::seconds(30);
      o.comm_timeout = timeout;
      return o;
    };
    std::shared_ptr<comm::Rendezvous> worker_nodes;
    std::thread joining([&] { worker_nodes = std::make_shared<comm::Rendezvous>(comm::rendezvous(options(1))); });
    auto nodes = std::make_shared<comm::Rendezvous>(comm::rendezvous(options(0), &listener));
    joining.join();
    worker_ = std::thread([this, &model, worker_nodes, tp, num_blocks, timeout, worker_hook] {
      try {
        engine::TpExecutorConfig config = executor_config(tp, num_blocks, timeout);
        config.nodes = worker_nodes;
        config.comm_plan.kind = comm::CommKind::kTcp;
        engine::TpExecutor worker(model, config);
        if (worker_hook) worker.set_rank_hook(worker_hook);
        worker.follow();
      } catch (...) {
        worker_error_ = std::current_exception();
      }
    });
    engine::TpExecutorConfig config = executor_config(tp, num_blocks, timeout);
    config.nodes = nodes;
    config.comm_plan.kind = comm::CommKind::kTcp;
    node0_ = std::make_unique<engine::TpExecutor>(model, config);
  }
  ~TwoNodes() {
    node0_.reset();
    if (worker_.joinable()) worker_.join();
  }
  engine::TpExecutor& node0() { return *node0_; }
  // Ends node 0 and waits for the worker; its error, or null when it stopped cleanly.
  std::exception_ptr finish() {
    node0_.reset();
    worker_.join();
    return worker_error_;
  }

 private:
  std::unique_ptr<engine::TpExecutor> node0_;
  std::thread worker_;
  std::exception_ptr worker_error_;
};

std::string describe(const std::exception_ptr& error) {
  if (!error) return "none";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

struct GreedyRun {
  std::vector<int32_t> tokens;
  std::vector<Tensor> logits;
};

GreedyRun greedy(engine::TpExecutor& executor, const std::vector<int32_t>& prompt, size_t new_tokens,
                 bool full_recompute) {
  GreedyRun run;
  std::vector<int32_t> ids = prompt;
  Tensor logits = executor.forward(step(prompt, 0, true));
  while (true) {
    run.logits.push_back(logits);
    const int64_t last = logits.dim(0) - 1;
    const int32_t token = engine::argmax(logits.data<float>() + last * logits.dim(1), logits.dim(1));
    run.tokens.push_back(token);
    ids.push_back(token);
    if (run.tokens.size() == new_tokens) return run;
    logits = full_recompute ? executor.forward(step(ids, 0, false))
                            : executor.forward(step({token}, static_cast<int32_t>(ids.size()) - 1, false));
  }
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

class engineTpNodes : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(engineTpNodes, TwoNodesGiveTheBitsOfOneProcess) {
  const std::filesystem::path dir = GetParam();
  nlohmann::json expected = nlohmann::json::parse(std::ifstream(dir / "expected.json"));
  const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
  const auto golden = expected["greedy_ids"].get<std::vector<int32_t>>();
  const bool full_recompute = expected.value("greedy_full_recompute", false);
  const model::HostModel model = model::read_host_model(dir);
  const int64_t num_blocks = (static_cast<int64_t>(prompt.size() + golden.size()) + kBlockSize - 1) / kBlockSize;
  const auto valid = model::valid_tp_sizes(model.spec);
  for (int tp : {2, 4}) {
    if (std::find(valid.begin(), valid.end(), tp) == valid.end()) continue;
    const std::string what = dir.filename().string() + " tp " + std::to_string(tp) + " over 2 nodes";
    engine::TpExecutor one_process(model, executor_config(tp, num_blocks, std::chrono::minutes(2)));
    const GreedyRun reference = greedy(one_process, prompt, golden.size(), full_recompute);
    TwoNodes nodes(model, tp, num_blocks);
    EXPECT_EQ(nodes.node0().communicator_name(), "tcp");
    EXPECT_EQ(nodes.node0().local_ranks(), tp / 2);
    const GreedyRun run = greedy(nodes.node0(), prompt, golden.size(), full_recompute);
    EXPECT_EQ(run.tokens, golden) << what;
    ASSERT_EQ(run.logits.size(), reference.logits.size()) << what;
    for (size_t i = 0; i < run.logits.size(); ++i) {
      EXPECT_TRUE(same_bits(run.logits[i], reference.logits[i])) << what << ": logits of step " << i << " differ";
    }
    EXPECT_FALSE(nodes.finish()) << what << ": the worker did not stop cleanly";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, engineTpNodes, ::testing::ValuesIn(testing::golden_cases()),
                         [](const auto& info) { return info.param.filename().string(); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(engineTpNodes);

std::filesystem::path golden_splitting(int tp) {
  for (const auto& dir : testing::golden_cases()) {
    const auto valid = model::valid_tp_sizes(model::read_model_spec(dir));
    if (std::find(valid.begin(), valid.end(), tp) != valid.end()) return dir;
  }
  return {};
}

TEST(engineTpNodesFaults, AWorkerRankThatThrowsBreaksTheGroupWithItsError) {
  const auto dir = golden_splitting(4);
  if (dir.empty()) GTEST_SKIP() << "no golden fixture that splits over 4 ranks";
  const model::HostModel model = model::read_host_model(dir);
  const std::vector<int32_t> prompt = {1, 5, 9, 2};
  int calls = 0;
  TwoNodes nodes(model, 4, 2, [&calls](int rank) {
    if (rank == 3 && ++calls == 2) throw Error(ErrorKind::kOutOfMemory, "no room for the activations");
  }, std::chrono::minutes(10));  // the others must be released by the abort, not the timeout
  nodes.node0().forward(step(prompt, 0, true));  // the first step runs
  const auto start = std::chrono::steady_clock::now();
  try {
    nodes.node0().forward(step(prompt, 0, true));
    ADD_FAILURE() << "the step succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDeviceFailure) << e.what();  // the engine stops: nothing can run
    EXPECT_NE(e.message().find("rank 3 aborted the group"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("cannot be built again"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("no room for the activations"), std::string::npos) << e.message();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
  try {
    nodes.node0().forward(step(prompt, 0, true));
    ADD_FAILURE() << "a step after the failure succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDeviceFailure) << e.what();
    EXPECT_NE(e.message().find("across nodes failed"), std::string::npos) << e.message();
    EXPECT_NE(e.hint().find("restart every node"), std::string::npos) << e.hint();
  }
  const std::string worker = describe(nodes.finish());
  EXPECT_NE(worker.find("no room for the activations"), std::string::npos) << worker;
}

TEST(engineTpNodesFaults, StepMessagesRoundTripAndCorruptOnesAreRefused) {
  model::ForwardBatch batch = step({4, 8, 15, 16}, 3, false);
  batch.attention.sliding_window = (int64_t{1} << 33) + 5;
  const std::vector<int32_t> words = engine::encode_step(batch);
  const model::ForwardBatch back = engine::decode_step(words);
  EXPECT_EQ(back.token_ids, batch.token_ids);
  EXPECT_EQ(back.attention.positions, batch.attention.positions);
  EXPECT_EQ(back.attention.query_start, batch.attention.query_start);
  EXPECT_EQ(back.attention.block_tables, batch.attention.block_tables);
  EXPECT_EQ(back.attention.max_blocks_per_seq, 2);
  EXPECT_EQ(back.attention.sliding_window, batch.attention.sliding_window);
  EXPECT_EQ(back.logit_rows, batch.logit_rows);
  model::ForwardBatch inconsistent = batch;
  inconsistent.attention.positions.pop_back();  // a position short of the tokens
  std::vector<std::vector<int32_t>> corrupt = {{}, {words.begin(), words.end() - 1}, words,
                                               engine::encode_step(inconsistent)};
  corrupt[2][0] = 1 << 30;  // a length past the end
  for (const auto& c : corrupt) {
    try {
      engine::decode_step(c);
      ADD_FAILURE() << "a corrupt message of " << c.size() << " words was decoded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCommFailure);
      EXPECT_NE(e.message().find("malformed step message"), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace tessera
