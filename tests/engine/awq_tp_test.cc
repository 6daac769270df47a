// Tensor parallelism of 4-bit (AWQ) models on the CPU: `lite auto_awq` exports
// of golden models split at tp = 2 and 4 (qkv and gate_up by output rows, o
// and down by whole input groups) give the greedy tokens of tp = 1 and its
// logits within max |diff| 1e-4 and relative norm 1e-5 (the tp bounds of
// tp_test.cc); a tp that would cut a group is refused with the sizes that work.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "../compare.h"
#include "../test_paths.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "engine/tp_executor.h"
#include "model/convert/awq_quantize.h"
#include "model/shard.h"
#include "model/transformer.h"

namespace tessera {
namespace {

model::ForwardBatch prefill(const std::vector<int32_t>& ids, int32_t start, int64_t num_blocks) {
  model::ForwardBatch batch;
  batch.token_ids = ids;
  batch.attention.positions.resize(ids.size());
  std::iota(batch.attention.positions.begin(), batch.attention.positions.end(), start);
  batch.attention.query_start = {0, static_cast<int32_t>(ids.size())};
  batch.attention.block_tables.resize(num_blocks);
  std::iota(batch.attention.block_tables.begin(), batch.attention.block_tables.end(), 0);
  batch.attention.max_blocks_per_seq = static_cast<int32_t>(num_blocks);
  batch.logit_rows.resize(ids.size());
  std::iota(batch.logit_rows.begin(), batch.logit_rows.end(), 0);
  return batch;
}

struct GreedyTokens {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // every prompt row, then each decode step's row
};

GreedyTokens greedy(const model::HostModel& model, int tp, const std::vector<int32_t>& prompt, int64_t steps) {
  engine::TpExecutorConfig config;
  config.tp = tp;
  config.block_size = 4;
  config.num_blocks = (static_cast<int64_t>(prompt.size()) + steps + 3) / 4;
  config.comm_timeout = std::chrono::seconds(60);
  engine::TpExecutor executor(model, config);
  GreedyTokens run;
  Tensor logits = executor.forward(prefill(prompt, 0, config.num_blocks));
  int32_t position = static_cast<int32_t>(prompt.size());
  for (int64_t step = 0;; ++step) {
    run.logits.insert(run.logits.end(), logits.data<float>(), logits.data<float>() + logits.numel());
    const int64_t vocab = logits.dim(1);
    const int32_t token = engine::argmax(logits.data<float>() + (logits.dim(0) - 1) * vocab, vocab);
    run.tokens.push_back(token);
    if (step + 1 == steps) break;
    logits = executor.forward(prefill({token}, position++, config.num_blocks));
  }
  return run;
}

std::filesystem::path quantized_golden(const std::string& name, int64_t group) {
  const auto out = std::filesystem::temp_directory_path() /
                   ("tessera-awq-tp-" + name + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  model::write_awq_model(testing::fixtures_dir() / "golden" / name, out, group);
  return out;
}

class engineAwqTp : public ::testing::TestWithParam<std::string> {};

TEST_P(engineAwqTp, EveryValidTpGivesTheTokensAndLogitsOfTp1) {
  const auto dir = quantized_golden(GetParam(), 32);
  const model::HostModel model = model::read_host_model(dir);
  ASSERT_TRUE(model.spec.quantization.awq());
  ASSERT_TRUE(model.part(0).contains("layers.0.qkv.qweight"));
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 7, 63};
  const GreedyTokens reference = greedy(model, 1, prompt, 12);
  int tested = 0;
  for (int tp : {2, 4}) {
    auto valid = model::valid_tp_sizes(model.spec);
    if (std::find(valid.begin(), valid.end(), tp) == valid.end()) continue;
    ++tested;
    const GreedyTokens run = greedy(model, tp, prompt, 12);
    EXPECT_EQ(run.tokens, reference.tokens) << GetParam() << " tp " << tp;
    auto c = testing::compare(run.logits.data(), reference.logits.data(), reference.logits.size());
    EXPECT_TRUE(c.within(1e-4, 1e-5)) << GetParam() << " tp " << tp << ": " << c.describe();
  }
  EXPECT_GE(tested, 1);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, engineAwqTp, ::testing::Values("llama_hd128_gqa2", "internlm2_gqa2", "qwen2_bias"));

TEST(engineAwqTp, ATpThatCutsAGroupIsRefusedWithTheSizesThatWork) {
  const auto dir = quantized_golden("internlm2_gqa2", 128);
  const model::HostModel model = model::read_host_model(dir);
  const int64_t g = model.spec.quantization.group_size;
  // The largest tp the heads allow but whose o or down inputs are not whole groups.
  int cutting = 0;
  for (int tp = 2; tp <= model.spec.num_heads; ++tp) {
    if (model.spec.num_heads % tp || (model.spec.num_kv_heads % tp && tp % model.spec.num_kv_heads)) continue;
    if ((model.spec.q_size() / tp) % g != 0 || model.spec.intermediate_size % (tp * g) != 0) cutting = tp;
  }
  ASSERT_GT(cutting, 0) << "every tp splits this model's groups";
  try {
    model::check_tp_size(model.spec, cutting);
    ADD_FAILURE() << "tp " << cutting << " accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("whole groups of 128"), std::string::npos) << e.message();
    EXPECT_NE(e.hint().find("sizes that work"), std::string::npos) << e.hint();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
