// The custom collectives on the GPU, against sums in host arithmetic. Label: gpu.
//
// same-device: 2, 3, 4 and 8 ranks on cuda:0, one-shot and two-shot, f32 /
// f16 / bf16, counts that are odd, a whole number of 16-byte packs, above the
// one-shot threshold and above the staging buffer (chunked): every rank must
// hold exactly the bits of Σ_{r=0..n-1} float(x_r) rounded once — the same
// bits for both algorithms. all_gather, broadcast and barrier likewise. A rank
// that never arrives fails its peer after the timeout; an abort at once.
// With two or more GPUs the custom (peer access) and nccl groups run too.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "backend/backend.h"
#include "comm/comm_group.h"
#include "comm/comm_plan.h"
#include "comm/nccl_communicator.h"
#include "core/error.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using RankFn = std::function<void(int rank, backend::Backend& backend, comm::Communicator& comm)>;

// Runs fn on every rank of a new group (each on its own thread and backend);
// returns each rank's error text, empty when it passed.
std::vector<std::string> run_group(const comm::CommPlan& plan, int world, DType dtype, const RankFn& fn,
                                   comm::CommGroupOptions options = {std::chrono::seconds(60)}) {
  auto group = comm::make_comm_group(plan, world, options);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<backend::Backend> backend;
      std::unique_ptr<comm::Communicator> comm;
      try {
        backend = backend::make_cuda_backend(plan.devices[r], dtype);
        comm = group->make_rank(r, backend->stream_handle());
        fn(r, *backend, *comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (comm) {
          comm->abort(e.what());
        } else {
          group->abort(r, e.what());
        }
      }
      comm.reset();
      backend.reset();
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

comm::CommPlan same_device(int world) { return {comm::CommKind::kSameDevice, std::vector<int>(world, 0), ""}; }

// Rank r's values, already rounded to `dtype` (host f32).
std::vector<float> rank_values(int rank, int64_t count, DType dtype) {
  std::vector<float> v(count);
  uint32_t state = 12345u + 7919u * rank;
  for (auto& x : v) {
    state = state * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<int32_t>(state >> 8) % 20001) / 1000.0f - 10.0f;
  }
  Tensor rounded = Tensor::from_f32(v, {count}).to_dtype(dtype).to_dtype(DType::kF32);
  return {rounded.data<float>(), rounded.data<float>() + count};
}

// Σ over ranks in order in f32, rounded once to dtype.
std::vector<float> expected_sum(int world, int64_t count, DType dtype) {
  std::vector<float> sum(count, 0.0f);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> v = rank_values(r, count, dtype);
    for (int64_t i = 0; i < count; ++i) sum[i] += v[i];
  }
  Tensor rounded = Tensor::from_f32(sum, {count}).to_dtype(dtype).to_dtype(DType::kF32);
  return {rounded.data<float>(), rounded.data<float>() + count};
}

// "" when equal bit for bit, else the first difference.
std::string first_difference(const float* actual, const std::vector<float>& expected) {
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0) {
      return "element " + std::to_string(i) + ": " + std::to_string(actual[i]) + " instead of " +
             std::to_string(expected[i]);
    }
  }
  return "";
}

TEST(CudaComm, TheBitwiseCheckCatchesAPlantedError) {
  std::vector<float> expected = expected_sum(3, 100, DType::kBF16);
  std::vector<float> wrong = expected;
  wrong[57] = std::nextafter(wrong[57], 1e9f);
  EXPECT_EQ(first_difference(expected.data(), expected), "");
  EXPECT_NE(first_difference(wrong.data(), expected), "");
}

void expect_all_reduce(const comm::CommPlan& plan, int world, DType dtype, int64_t count,
                       comm::AllReduceAlgorithm algorithm, bool exact) {
  const std::vector<float> want = expected_sum(world, count, dtype);
  auto errors = run_group(
      plan, world, dtype,
      [&](int r, backend::Backend& backend, comm::Communicator& comm) {
        Tensor data = backend.upload_weight(Tensor::from_f32(rank_values(r, count, dtype), {count}));
        comm.all_reduce_sum(data);
        Tensor got = backend.to_host_f32(data);
        if (exact) {
          const std::string diff = first_difference(got.data<float>(), want);
          if (!diff.empty()) throw Error(ErrorKind::kInternal, diff);
        } else {
          for (int64_t i = 0; i < count; ++i) {
            const float tolerance = dtype == DType::kF32 ? 1e-4f : 0.15f;
            if (std::fabs(got.data<float>()[i] - want[i]) > tolerance * (1.0f + std::fabs(want[i]))) {
              throw Error(ErrorKind::kInternal, "element " + std::to_string(i) + ": " +
                                                    std::to_string(got.data<float>()[i]) + " instead of " +
                                                    std::to_string(want[i]));
            }
          }
        }
      },
      {std::chrono::seconds(60), algorithm});
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "") << comm::comm_kind_name(plan.kind) << " world " << world << " " << dtype_name(dtype)
                             << " count " << count << " " << comm::all_reduce_algorithm_name(algorithm) << " rank "
                             << r;
  }
}

TEST(CudaComm, SameDeviceAllReduceIsTheRankOrderSumBitForBit) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const int64_t past_staging = static_cast<int64_t>(comm::kCustomMaxBytes / 4) + 13;  // chunked, in f32 units
  for (int world : {2, 3, 4, 8}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1003}, int64_t{4096}, int64_t{300000}, past_staging}) {
        for (auto algorithm : {comm::AllReduceAlgorithm::kOneShot, comm::AllReduceAlgorithm::kTwoShot}) {
          expect_all_reduce(same_device(world), world, dtype, count, algorithm, true);
        }
      }
    }
  }
}

TEST(CudaComm, SameDeviceGatherBroadcastAndBarrier) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (int world : {2, 3, 4}) {
    for (int64_t count : {int64_t{5}, int64_t{4096}, static_cast<int64_t>(comm::kCustomMaxBytes / 4) + 3}) {
      auto errors = run_group(same_device(world), world, DType::kF32, [&](int r, backend::Backend& backend,
                                                                            comm::Communicator& comm) {
        const std::vector<float> mine = rank_values(r, count, DType::kF32);
        Tensor input = backend.upload_weight(Tensor::from_f32(mine, {count}));
        Tensor output = backend.upload_weight(Tensor::empty({world, count}, DType::kF32));
        comm.all_gather(input, output);
        Tensor gathered = backend.to_host_f32(output);
        for (int g = 0; g < world; ++g) {
          const std::string diff = first_difference(gathered.data<float>() + g * count, rank_values(g, count, DType::kF32));
          if (!diff.empty()) throw Error(ErrorKind::kInternal, "all_gather part " + std::to_string(g) + " " + diff);
        }
        Tensor data = backend.upload_weight(Tensor::from_f32(mine, {count}));
        comm.broadcast(data, world - 1);
        const std::string diff =
            first_difference(backend.to_host_f32(data).data<float>(), rank_values(world - 1, count, DType::kF32));
        if (!diff.empty()) throw Error(ErrorKind::kInternal, "broadcast " + diff);
        comm.barrier();
      });
      for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "world " << world << " count " << count << " rank " << r;
    }
  }
}

TEST(CudaComm, SameDeviceRankThatNeverArrivesFailsItsPeerAfterTheTimeout) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const auto start = Clock::now();
  std::string second_call;
  auto errors = run_group(
      same_device(2), 2, DType::kF32,
      [&](int r, backend::Backend& backend, comm::Communicator& comm) {
        if (r == 1) return;  // never calls the collective
        Tensor data = backend.upload_weight(Tensor::from_f32({1.0f, 2.0f}, {2}));
        try {
          comm.all_reduce_sum(data);
        } catch (const Error&) {
          try {
            comm.all_reduce_sum(data);  // a failed group stays failed
          } catch (const Error& e) {
            second_call = e.message();
          }
          throw;
        }
      },
      {std::chrono::milliseconds(2000)});
  EXPECT_NE(errors[0].find("did not reach a barrier within 2000 ms"), std::string::npos) << errors[0];
  EXPECT_NE(second_call, "");
  EXPECT_EQ(errors[1], "");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 30.0);
}

TEST(CudaComm, SameDeviceAbortReleasesAWaitingPeerAtOnce) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const auto start = Clock::now();
  auto errors = run_group(
      same_device(2), 2, DType::kF32,
      [&](int r, backend::Backend& backend, comm::Communicator& comm) {
        if (r == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          comm.abort("planted failure");
          return;
        }
        Tensor data = backend.upload_weight(Tensor::from_f32({1.0f}, {1}));
        comm.all_reduce_sum(data);
      },
      {std::chrono::minutes(10)});
  EXPECT_NE(errors[0].find("planted failure"), std::string::npos) << errors[0];
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 30.0);
}

TEST(CudaComm, CustomAndNcclAcrossGpus) {
  const int gpus = backend::cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs two GPUs (" << gpus << " visible)";
  const int world = std::min(gpus, 8);
  comm::CommPlan plan;
  for (int r = 0; r < world; ++r) plan.devices.push_back(r);
  if (comm::every_pair_has_peer_access(plan.devices, comm::query_peer_access())) {
    plan.kind = comm::CommKind::kCustom;
    for (int64_t count : {int64_t{7}, int64_t{4096}, int64_t{300000}}) {
      for (auto algorithm : {comm::AllReduceAlgorithm::kOneShot, comm::AllReduceAlgorithm::kTwoShot}) {
        expect_all_reduce(plan, world, DType::kBF16, count, algorithm, true);
      }
    }
  }
  if (comm::nccl_available()) {
    plan.kind = comm::CommKind::kNccl;
    expect_all_reduce(plan, world, DType::kF32, 300000, comm::AllReduceAlgorithm::kAuto, false);
  }
}

}  // namespace
}  // namespace tessera
