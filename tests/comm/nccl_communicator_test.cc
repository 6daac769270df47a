// The NCCL communicator where it can run: one rank per visible GPU (a group of
// one on a single GPU), each collective on device tensors against the sum in
// host arithmetic. Skipped in builds without NCCL or machines without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <exception>
#include <thread>

#include "backend/backend.h"
#include "comm/nccl_communicator.h"
#include "core/error.h"

namespace tessera {
namespace {

TEST(CommNccl, CollectivesOnEveryVisibleGpu) {
  if (!comm::nccl_available()) GTEST_SKIP() << "this build has no NCCL communicator";
  const int world = backend::cuda_device_count();
  if (world == 0) GTEST_SKIP() << "no GPU visible";
  const comm::NcclUniqueId id = comm::make_nccl_unique_id();
  const int64_t count = 1000 + 3;  // not divisible by the rank count
  std::vector<std::string> failures(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto backend = backend::make_cuda_backend(r, DType::kF32);
        auto communicator = comm::make_nccl_communicator(id, r, world, r, nullptr, comm::NcclCommOptions{std::chrono::seconds(60), nullptr});
        std::vector<float> values(count);
        for (int64_t i = 0; i < count; ++i) values[i] = static_cast<float>((i % 17) * (r + 1));
        Tensor data = backend->upload_weight(Tensor::from_f32(values, {count}));
        communicator->all_reduce_sum(data);
        Tensor sum = backend->to_host_f32(data);
        for (int64_t i = 0; i < count; ++i) {
          const float want = static_cast<float>((i % 17) * world * (world + 1) / 2);
          if (sum.data<float>()[i] != want) {
            failures[r] = "all_reduce_sum element " + std::to_string(i);
            return;
          }
        }
        Tensor gathered = backend->upload_weight(Tensor::empty({world, count}, DType::kF32));
        communicator->all_gather(backend->upload_weight(Tensor::from_f32(values, {count})), gathered);
        Tensor host = backend->to_host_f32(gathered);
        for (int source = 0; source < world; ++source) {
          if (host.data<float>()[source * count + 16] != 16.0f * (source + 1)) failures[r] = "all_gather";
        }
        Tensor root_data = backend->upload_weight(Tensor::from_f32(values, {count}));
        communicator->broadcast(root_data, 0);
        if (backend->to_host_f32(root_data).data<float>()[16] != 16.0f) failures[r] = "broadcast";
        communicator->barrier();
      } catch (const std::exception& e) {
        failures[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

TEST(CommNccl, UnavailableIsUnsupportedNotACrash) {
  if (comm::nccl_available()) GTEST_SKIP() << "this build has NCCL";
  try {
    comm::make_nccl_unique_id();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  }
}

}  // namespace
}  // namespace tessera
