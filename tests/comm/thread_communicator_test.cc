// The thread communicator: every collective at world sizes 1 to 4 with random
// sizes (most of them not divisible by the rank count), results compared
// exactly with a sum in rank order 0..n-1, and the failures: a rank that never
// arrives, an abort, collectives that do not match.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <thread>

#include "comm/thread_communicator.h"
#include "core/error.h"
#include "rank_threads.h"

namespace tessera {
namespace {

using comm::Communicator;

using testing::comm_failure_message;
using testing::expect_no_errors;
using testing::random_floats;

// Runs fn on each rank's thread.
std::vector<std::exception_ptr> run_ranks(std::vector<std::unique_ptr<Communicator>>& comms,
                                          const std::function<void(Communicator&)>& fn) {
  return testing::run_ranks<Communicator>(comms, fn);
}

// Sizes for one world size: small, odd, around the rank count, and random.
std::vector<int64_t> test_sizes(int world, uint64_t seed) {
  std::vector<int64_t> sizes = {1, 2, 3, 5, 7, world + 1, 4 * world + 3, 1000 + world};
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 6; ++i) sizes.push_back(std::uniform_int_distribution<int64_t>(1, 5000)(rng));
  return sizes;
}

class ThreadComm : public ::testing::TestWithParam<int> {};

TEST_P(ThreadComm, AllReduceSumF32EqualsRankOrderSumOnEveryRank) {
  const int world = GetParam();
  auto comms = comm::make_thread_communicators(world);
  for (int64_t count : test_sizes(world, 11)) {
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < world; ++r) inputs.push_back(random_floats(count, 1000 * count + r));
    std::vector<float> expected(count, 0.0f);
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < count; ++i) expected[i] += inputs[r][i];
    }
    std::vector<Tensor> tensors;
    for (int r = 0; r < world; ++r) tensors.push_back(Tensor::from_f32(inputs[r], {count}));
    expect_no_errors(run_ranks(comms, [&](Communicator& c) { c.all_reduce_sum(tensors[c.rank()]); }));
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(std::memcmp(tensors[r].data<float>(), expected.data(), count * sizeof(float)), 0)
          << "world " << world << ", count " << count << ", rank " << r;
    }
  }
}

TEST_P(ThreadComm, AllReduceSumBf16AndI32) {
  const int world = GetParam();
  auto comms = comm::make_thread_communicators(world);
  for (int64_t count : test_sizes(world, 12)) {
    std::vector<Tensor> halves, ints;
    std::vector<float> expected_half(count, 0.0f);
    std::vector<int32_t> expected_int(count, 0);
    for (int r = 0; r < world; ++r) {
      Tensor h = Tensor::from_f32(random_floats(count, 7 * count + r), {count}).to_dtype(DType::kBF16);
      std::vector<float> as_f32(count);
      convert_to_f32(DType::kBF16, h.raw_data(), as_f32.data(), count);
      for (int64_t i = 0; i < count; ++i) expected_half[i] += as_f32[i];
      halves.push_back(h);
      Tensor n = Tensor::empty({count}, DType::kI32);
      for (int64_t i = 0; i < count; ++i) {
        n.data<int32_t>()[i] = static_cast<int32_t>(i * 31 + r * 1000003) % 100000 - 50000;
        expected_int[i] += n.data<int32_t>()[i];
      }
      ints.push_back(n);
    }
    expect_no_errors(run_ranks(comms, [&](Communicator& c) {
      c.all_reduce_sum(halves[c.rank()]);
      c.all_reduce_sum(ints[c.rank()]);
    }));
    std::vector<uint16_t> rounded(count);
    convert_from_f32(expected_half.data(), DType::kBF16, rounded.data(), count);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(std::memcmp(halves[r].raw_data(), rounded.data(), count * 2), 0) << "bf16, count " << count;
      EXPECT_EQ(std::memcmp(ints[r].raw_data(), expected_int.data(), count * 4), 0) << "i32, count " << count;
    }
  }
}

TEST_P(ThreadComm, AllGatherPlacesRankRAtSliceR) {
  const int world = GetParam();
  auto comms = comm::make_thread_communicators(world);
  for (int64_t count : test_sizes(world, 13)) {
    std::vector<std::vector<float>> inputs;
    std::vector<Tensor> outputs;
    for (int r = 0; r < world; ++r) {
      inputs.push_back(random_floats(count, 3 * count + r));
      outputs.push_back(Tensor::empty({world, count}, DType::kF32));
    }
    expect_no_errors(run_ranks(comms, [&](Communicator& c) {
      Tensor input = Tensor::from_f32(inputs[c.rank()], {count});
      c.all_gather(input, outputs[c.rank()]);
    }));
    for (int r = 0; r < world; ++r) {
      for (int source = 0; source < world; ++source) {
        EXPECT_EQ(std::memcmp(outputs[r].data<float>() + source * count, inputs[source].data(), count * 4), 0)
            << "world " << world << ", count " << count << ", rank " << r << ", slice " << source;
      }
    }
  }
}

TEST_P(ThreadComm, BroadcastFromEveryRoot) {
  const int world = GetParam();
  auto comms = comm::make_thread_communicators(world);
  for (int64_t count : test_sizes(world, 14)) {
    for (int root = 0; root < world; ++root) {
      std::vector<Tensor> tensors;
      for (int r = 0; r < world; ++r) tensors.push_back(Tensor::from_f32(random_floats(count, count + r), {count}));
      const std::vector<float> want(tensors[root].data<float>(), tensors[root].data<float>() + count);
      expect_no_errors(run_ranks(comms, [&](Communicator& c) { c.broadcast(tensors[c.rank()], root); }));
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(std::memcmp(tensors[r].data<float>(), want.data(), count * 4), 0)
            << "count " << count << ", root " << root << ", rank " << r;
      }
    }
  }
}

TEST_P(ThreadComm, BarrierReleasesOnlyWhenAllArrived) {
  const int world = GetParam();
  auto comms = comm::make_thread_communicators(world);
  std::atomic<int> before{0};
  std::atomic<int> wrong{0};
  expect_no_errors(run_ranks(comms, [&](Communicator& c) {
    for (int round = 1; round <= 20; ++round) {
      if (c.rank() == world - 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
      before.fetch_add(1);
      c.barrier();
      if (before.load() < round * world) wrong.fetch_add(1);
      c.barrier();
    }
  }));
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(ThreadComm, MissingRankIsACommFailureAfterTheTimeout) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "one rank cannot miss another";
  auto comms = comm::make_thread_communicators(world, {std::chrono::milliseconds(200)});
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(comms, [&](Communicator& c) {
    if (c.rank() == world - 1) return;  // never arrives
    Tensor t = Tensor::from_f32({1.0f, 2.0f, 3.0f}, {3});
    c.all_reduce_sum(t);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  for (int r = 0; r + 1 < world; ++r) {
    std::string message = comm_failure_message(errors[r]);
    EXPECT_NE(message.find("rank(s) " + std::to_string(world - 1)), std::string::npos) << message;
  }
  // The group stays failed: even the late rank fails at once.
  auto late = run_ranks(comms, [&](Communicator& c) {
    if (c.rank() == world - 1) c.barrier();
  });
  comm_failure_message(late[world - 1]);
}

TEST_P(ThreadComm, AbortReleasesWaitingPeersAtOnce) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "no peer to release";
  auto comms = comm::make_thread_communicators(world, {std::chrono::minutes(10)});
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(comms, [&](Communicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      c.abort("out of memory in layer 3");
      return;
    }
    c.barrier();
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  for (int r = 0; r < world; ++r) {
    if (r == 1) continue;
    std::string message = comm_failure_message(errors[r]);
    EXPECT_NE(message.find("rank 1 aborted the group: out of memory in layer 3"), std::string::npos) << message;
  }
}

TEST_P(ThreadComm, MismatchedCollectivesFailEveryRank) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "one rank always agrees with itself";
  auto comms = comm::make_thread_communicators(world, {std::chrono::seconds(30)});
  auto errors = run_ranks(comms, [&](Communicator& c) {
    Tensor t = Tensor::empty({c.rank() == 1 ? 5 : 4}, DType::kF32);
    c.all_reduce_sum(t);
  });
  for (int r = 0; r < world; ++r) {
    std::string message = comm_failure_message(errors[r]);
    EXPECT_NE(message.find("do not match"), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(World, ThreadComm, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(CommThread, RefusesDeviceOrWrongSizes) {
  auto comms = comm::make_thread_communicators(2);
  auto errors = run_ranks(comms, [&](Communicator& c) {
    Tensor in = Tensor::empty({3}, DType::kF32);
    Tensor out = Tensor::empty({5}, DType::kF32);  // needs 6
    c.all_gather(in, out);
  });
  for (const auto& e : errors) {
    ASSERT_TRUE(e);
    try {
      std::rethrow_exception(e);
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::kInvalidArgument) << error.what();
    }
  }
  EXPECT_THROW(comm::make_thread_communicators(0), Error);
}

}  // namespace
}  // namespace tessera
