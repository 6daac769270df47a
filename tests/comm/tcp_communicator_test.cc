// The tcp communicator and the multi-node rendezvous, over loopback: groups
// of 1 to 4 ranks, each rank a "node" of its own on its own thread (and one
// group of two nodes with two ranks each), met at a listener on a free port.
// Every collective with random sizes (most not divisible by the rank count),
// compared exactly with a sum in rank order 0..n-1 — the thread
// communicator's bits — and the failures: a peer that aborts, goes away,
// never arrives, or calls another collective; nodes the rendezvous must
// refuse (another model, another --tp, a node twice, nobody listening).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <thread>

#include "comm/tcp_rendezvous.h"
#include "core/error.h"
#include "rank_threads.h"

namespace tessera {
namespace {

using comm::TcpCommunicator;
using Links = std::vector<std::unique_ptr<TcpCommunicator>>;

comm::RendezvousOptions node_options(int world, int nnodes, int node, int port) {
  comm::RendezvousOptions o;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.nnodes = nnodes;
  o.node_rank = node;
  o.world_size = world;
  o.fingerprint = "model A";
  o.offer = 1000 + node;
  o.timeout = std::chrono::seconds(20);
  o.comm_timeout = std::chrono::seconds(20);
  return o;
}

// Runs each node's rendezvous on its own thread (node 0 on a free port);
// every rank's link in global rank order, or each node's error.
struct Group {
  Links links;
  std::vector<int64_t> agreed;
  std::vector<std::exception_ptr> errors;
};

Group meet(int world, int nnodes, const std::function<void(comm::RendezvousOptions&)>& edit = {},
           std::chrono::milliseconds comm_timeout = std::chrono::seconds(20)) {
  comm::TcpListener listener(0);
  Group group;
  std::vector<comm::Rendezvous> results(nnodes);
  group.errors.resize(nnodes);
  std::vector<std::thread> threads;
  for (int node = 0; node < nnodes; ++node) {
    threads.emplace_back([&, node] {
      try {
        comm::RendezvousOptions o = node_options(world, nnodes, node, listener.port());
        o.comm_timeout = comm_timeout;
        if (edit) edit(o);
        results[node] = comm::rendezvous(o, node == 0 ? &listener : nullptr);
      } catch (...) {
        group.errors[node] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& r : results) {
    group.agreed.push_back(r.agreed_offer);
    for (auto& link : r.links) group.links.push_back(std::move(link));
  }
  return group;
}

using testing::comm_failure_message;
using testing::expect_no_errors;
using testing::random_floats;

// Runs fn on each rank's thread.
std::vector<std::exception_ptr> run_ranks(std::vector<std::unique_ptr<TcpCommunicator>>& comms,
                                          const std::function<void(TcpCommunicator&)>& fn) {
  return testing::run_ranks<TcpCommunicator>(comms, fn);
}

std::vector<int64_t> test_sizes(int world, uint64_t seed) {
  std::vector<int64_t> sizes = {1, 2, 3, 5, world + 1, 4 * world + 3, 1000 + world, 300000};
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 4; ++i) sizes.push_back(std::uniform_int_distribution<int64_t>(1, 5000)(rng));
  return sizes;
}

class TcpComm : public ::testing::TestWithParam<int> {};

TEST_P(TcpComm, RendezvousGivesRanksInOrderAndTheSmallestOffer) {
  const int world = GetParam();
  Group group = meet(world, world);
  expect_no_errors(group.errors);
  ASSERT_EQ(static_cast<int>(group.links.size()), world);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(group.links[r]->rank(), r);
    EXPECT_EQ(group.links[r]->world_size(), world);
    EXPECT_EQ(group.links[r]->backend_name(), "tcp");
    EXPECT_EQ(group.agreed[r], 1000);  // node n offers 1000 + n
  }
}

TEST_P(TcpComm, AllReduceSumEqualsRankOrderSumOnEveryRank) {
  const int world = GetParam();
  Group group = meet(world, world);
  expect_no_errors(group.errors);
  for (int64_t count : test_sizes(world, 21)) {
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < world; ++r) inputs.push_back(random_floats(count, 1000 * count + r));
    std::vector<float> expected(count, 0.0f);
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < count; ++i) expected[i] += inputs[r][i];
    }
    std::vector<Tensor> f32, bf16, i32;
    std::vector<float> expected_bf16(count, 0.0f);
    std::vector<int32_t> expected_i32(count, 0);
    for (int r = 0; r < world; ++r) {
      f32.push_back(Tensor::from_f32(inputs[r], {count}));
      bf16.push_back(Tensor::from_f32(inputs[r], {count}).to_dtype(DType::kBF16));
      std::vector<float> as_f32(count);
      convert_to_f32(DType::kBF16, bf16.back().raw_data(), as_f32.data(), count);
      for (int64_t i = 0; i < count; ++i) expected_bf16[i] += as_f32[i];
      i32.push_back(Tensor::empty({count}, DType::kI32));
      for (int64_t i = 0; i < count; ++i) {
        i32.back().data<int32_t>()[i] = static_cast<int32_t>((i * 31 + r * 1000003) % 100000) - 50000;
        expected_i32[i] += i32.back().data<int32_t>()[i];
      }
    }
    expect_no_errors(run_ranks(group.links, [&](TcpCommunicator& c) {
      c.all_reduce_sum(f32[c.rank()]);
      c.all_reduce_sum(bf16[c.rank()]);
      c.all_reduce_sum(i32[c.rank()]);
    }));
    std::vector<uint16_t> rounded(count);
    convert_from_f32(expected_bf16.data(), DType::kBF16, rounded.data(), count);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(std::memcmp(f32[r].raw_data(), expected.data(), count * 4), 0) << "f32 count " << count << " rank " << r;
      EXPECT_EQ(std::memcmp(bf16[r].raw_data(), rounded.data(), count * 2), 0) << "bf16 count " << count;
      EXPECT_EQ(std::memcmp(i32[r].raw_data(), expected_i32.data(), count * 4), 0) << "i32 count " << count;
    }
  }
}

TEST_P(TcpComm, AllGatherAndBroadcastFromEveryRoot) {
  const int world = GetParam();
  Group group = meet(world, world);
  expect_no_errors(group.errors);
  for (int64_t count : test_sizes(world, 22)) {
    std::vector<std::vector<float>> inputs;
    std::vector<Tensor> outputs;
    for (int r = 0; r < world; ++r) {
      inputs.push_back(random_floats(count, 3 * count + r));
      outputs.push_back(Tensor::empty({world, count}, DType::kF32));
    }
    expect_no_errors(run_ranks(group.links, [&](TcpCommunicator& c) {
      Tensor input = Tensor::from_f32(inputs[c.rank()], {count});
      c.all_gather(input, outputs[c.rank()]);
    }));
    for (int r = 0; r < world; ++r) {
      for (int source = 0; source < world; ++source) {
        EXPECT_EQ(std::memcmp(outputs[r].data<float>() + source * count, inputs[source].data(), count * 4), 0)
            << "all_gather count " << count << ", rank " << r << ", slice " << source;
      }
    }
    for (int root = 0; root < world; ++root) {
      std::vector<Tensor> tensors;
      for (int r = 0; r < world; ++r) tensors.push_back(Tensor::from_f32(inputs[r], {count}));
      expect_no_errors(run_ranks(group.links, [&](TcpCommunicator& c) {
        if (c.rank() == root || count % 2) {
          c.broadcast(tensors[c.rank()], root);
        } else {
          c.broadcast_unbounded(tensors[c.rank()], root);  // the same collective on the wire
        }
      }));
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(std::memcmp(tensors[r].data<float>(), inputs[root].data(), count * 4), 0)
            << "broadcast count " << count << ", root " << root << ", rank " << r;
      }
    }
  }
  expect_no_errors(run_ranks(group.links, [&](TcpCommunicator& c) { c.barrier(); }));
}

TEST_P(TcpComm, AbortOrAVanishedPeerFailsTheOthersAtOnce) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "no peer to fail";
  for (int culprit : {0, world - 1}) {
    Group group = meet(world, world, {}, std::chrono::minutes(10));
    expect_no_errors(group.errors);
    const auto start = std::chrono::steady_clock::now();
    auto errors = run_ranks(group.links, [&](TcpCommunicator& c) {
      if (c.rank() == culprit) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        c.abort("out of memory in layer 3");
        return;
      }
      Tensor t = Tensor::from_f32({1.0f, 2.0f}, {2});
      c.all_reduce_sum(t);
    });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
    for (int r = 0; r < world; ++r) {
      if (r == culprit) continue;
      const std::string message = comm_failure_message(errors[r]);
      EXPECT_NE(message.find("rank " + std::to_string(culprit) + " aborted the group: out of memory in layer 3"),
                std::string::npos)
          << "rank " << r << ": " << message;
    }
  }
  // A rank whose process ends (its links destroyed) without a word.
  Group group = meet(world, world, {}, std::chrono::minutes(10));
  expect_no_errors(group.errors);
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(group.links, [&](TcpCommunicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      group.links[1].reset();  // c is gone too
      return;
    }
    c.barrier();
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  for (int r = 0; r < world; ++r) {
    if (r != 1) {
      const std::string message = comm_failure_message(errors[r]);
      EXPECT_NE(message.find("closed the connection"), std::string::npos) << "rank " << r << ": " << message;
    }
  }
}

TEST_P(TcpComm, MissingRankTimesOutAndMismatchFailsEveryRank) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "one rank cannot miss or contradict another";
  Group late = meet(world, world, {}, std::chrono::milliseconds(300));
  expect_no_errors(late.errors);
  auto errors = run_ranks(late.links, [&](TcpCommunicator& c) {
    if (c.rank() == world - 1) return;  // never arrives
    c.barrier();
  });
  for (int r = 0; r + 1 < world; ++r) {
    EXPECT_NE(comm_failure_message(errors[r]).find("in time"), std::string::npos);
  }
  Group group = meet(world, world);
  expect_no_errors(group.errors);
  errors = run_ranks(group.links, [&](TcpCommunicator& c) {
    Tensor t = Tensor::empty({c.rank() == 1 ? 5 : 4}, DType::kF32);
    c.all_reduce_sum(t);
  });
  for (int r = 0; r < world; ++r) {
    const std::string message = comm_failure_message(errors[r]);
    EXPECT_NE(message.find("do not match"), std::string::npos) << message;
  }
  // The group stays failed.
  errors = run_ranks(group.links, [&](TcpCommunicator& c) { c.barrier(); });
  for (int r = 0; r < world; ++r) comm_failure_message(errors[r]);
}

INSTANTIATE_TEST_SUITE_P(World, TcpComm, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(TcpRendezvous, TwoNodesOfTwoRanksEach) {
  Group group = meet(4, 2);
  expect_no_errors(group.errors);
  ASSERT_EQ(group.links.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(group.links[r]->rank(), r);
  std::vector<Tensor> t;
  for (int r = 0; r < 4; ++r) t.push_back(Tensor::from_f32({float(r), 1.0f}, {2}));
  expect_no_errors(run_ranks(group.links, [&](TcpCommunicator& c) { c.all_reduce_sum(t[c.rank()]); }));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(t[r].data<float>()[0], 6.0f);
    EXPECT_EQ(t[r].data<float>()[1], 4.0f);
  }
}

TEST(TcpRendezvous, RefusesNodesThatDoNotMatch) {
  struct Case {
    const char* name;
    std::function<void(comm::RendezvousOptions&)> edit;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"another model", [](auto& o) { if (o.node_rank == 1) o.fingerprint = "model B"; }, "node 1 runs model B, node 0 runs model A"},
      {"another --tp", [](auto& o) { if (o.node_rank == 1) o.world_size = 4; }, "--tp 4 --nnodes 2, node 0 with --tp 2"},
      {"node 1 twice", [](auto& o) { if (o.node_rank == 2) o.node_rank = 1; }, "joined twice"},
  };
  for (const auto& c : cases) {
    const int nnodes = std::string(c.name) == "node 1 twice" ? 3 : 2;
    Group group = meet(nnodes, nnodes, c.edit);
    // Node 0 fails with the reason, and so does at least one other node.
    const std::string message = comm_failure_message(group.errors[0]);
    EXPECT_NE(message.find(c.reason), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find("same model, --tp, --nnodes"), std::string::npos) << message;
    bool refused = false;
    for (int n = 1; n < nnodes; ++n) {
      if (!group.errors[n]) continue;
      const std::string m = comm_failure_message(group.errors[n]);
      refused = refused || m.find(c.reason) != std::string::npos;
    }
    EXPECT_TRUE(refused) << c.name;
  }
}

TEST(TcpRendezvous, NobodyListeningIsAClearErrorAfterTheTimeout) {
  int port = 0;
  {
    comm::TcpListener probe(0);  // a port that is free once the probe closes
    port = probe.port();
  }
  comm::RendezvousOptions o = node_options(2, 2, 1, port);
  o.timeout = std::chrono::milliseconds(500);
  try {
    comm::rendezvous(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommFailure);
    EXPECT_NE(std::string(e.message()).find("cannot connect to node 0 at 127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("--master-addr"), std::string::npos) << e.hint();
  }
}

TEST(TcpRendezvous, TpThatDoesNotSplitOverTheNodesIsRefused) {
  EXPECT_EQ(comm::ranks_per_node(4, 2, 1), 2);
  try {
    comm::ranks_per_node(3, 2, 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.hint().find("--tp 2, 4, 6"), std::string::npos) << e.hint();
  }
  EXPECT_THROW(comm::ranks_per_node(4, 2, 2), Error);
}

}  // namespace
}  // namespace tessera
