// NCCL on one GPU. Label: gpu.
//  - a group of one: all_reduce, all_gather, broadcast and barrier run and
//    leave the data as it was (the sum of one rank);
//  - a group of two where rank 1 never comes: rank 0's initialisation fails
//    with Error(kCommFailure) after the timeout instead of hanging;
//  - two ranks on one GPU (which NCCL refuses): both fail with
//    Error(kCommFailure) carrying NCCL's message, not a crash.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backend/backend.h"
#include "comm/nccl_communicator.h"
#include "core/error.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

bool usable() { return comm::nccl_available() && backend::cuda_device_count() > 0; }

TEST(CudaNccl, WorldOfOneRunsEveryCollective) {
  if (!usable()) GTEST_SKIP() << "needs NCCL and a GPU";
  auto backend = backend::make_cuda_backend(0, DType::kBF16);
  auto comm = comm::make_nccl_communicator(comm::make_nccl_unique_id(), 0, 1, 0, backend->stream_handle(),
                                           comm::NcclCommOptions{std::chrono::seconds(60), nullptr});
  EXPECT_EQ(comm->world_size(), 1);
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  Tensor data = backend->upload_weight(Tensor::from_f32(values, {5}));
  comm->all_reduce_sum(data);
  Tensor gathered = backend->upload_weight(Tensor::empty({5}, DType::kF32));
  comm->all_gather(data, gathered);
  comm->broadcast(data, 0);
  comm->barrier();
  Tensor a = backend->to_host_f32(data), b = backend->to_host_f32(gathered);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a.data<float>()[i], values[i]) << i;
    EXPECT_EQ(b.data<float>()[i], values[i]) << i;
  }
  Tensor wrong_device = Tensor::from_f32(values, {5});  // host memory
  EXPECT_THROW(comm->all_reduce_sum(wrong_device), Error);
}

TEST(CudaNccl, ARankThatNeverComesFailsInitialisationAfterTheTimeout) {
  if (!usable()) GTEST_SKIP() << "needs NCCL and a GPU";
  auto backend = backend::make_cuda_backend(0, DType::kF32);
  const auto start = Clock::now();
  try {
    comm::make_nccl_communicator(comm::make_nccl_unique_id(), 0, 2, 0, backend->stream_handle(),
                                 comm::NcclCommOptions{std::chrono::seconds(3), nullptr});
    ADD_FAILURE() << "a group of two started with one rank";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommFailure) << e.what();
    EXPECT_NE(e.message().find("did not complete within 3000 ms"), std::string::npos) << e.message();
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 60.0);
}

TEST(CudaNccl, TwoRanksOnOneGpuAreACommFailureNotACrash) {
  if (!usable()) GTEST_SKIP() << "needs NCCL and a GPU";
  const comm::NcclUniqueId id = comm::make_nccl_unique_id();
  auto abort = std::make_shared<comm::GroupAbort>();
  std::string errors[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      try {
        auto backend = backend::make_cuda_backend(0, DType::kF32);
        comm::NcclCommOptions options;
        options.timeout = std::chrono::seconds(20);
        options.group_abort = abort;
        auto comm = comm::make_nccl_communicator(id, r, 2, 0, backend->stream_handle(), options);
        Tensor data = backend->upload_weight(Tensor::from_f32({1.0f}, {1}));
        comm->all_reduce_sum(data);
        errors[r] = "ok";
      } catch (const Error& e) {
        errors[r] = std::string(error_kind_name(e.kind())) + ": " + e.message();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    // NCCL may refuse at start-up ("Duplicate GPU detected") or later; never "ok", never a crash.
    EXPECT_NE(errors[r], "ok") << "rank " << r;
    EXPECT_NE(errors[r].find("comm_failure"), std::string::npos) << "rank " << r << ": " << errors[r];
  }
}

}  // namespace
}  // namespace tessera
