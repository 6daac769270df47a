// The loaded kernel image decides the compute dtype and what check_supported
// accepts. On a GPU of compute capability 8.0+ with a normal build this checks
// bf16 is chosen; in a build of compute_75 PTX only (-DTESSERA_CUDA_ARCHS=75-virtual,
// what a T4 gets) run on such a GPU it checks the T4's path: f16 chosen with a
// warning, bf16 refused, the scalar attention kernels. Label: gpu.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/error.h"

namespace tessera::backend {
namespace {

TEST(KernelImage, TheLoadedImageIsKnownAndBoundsTheCapability) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const CudaDeviceInfo info = cuda_device_info(0);
  std::printf("cuda:0 %s, compute capability %d.%d, kernels loaded as %s (built for %s)\n", info.name.c_str(),
              info.compute_major, info.compute_minor, info.describe_image().c_str(), info.built_archs.c_str());
  ASSERT_GT(info.effective_capability(), 0) << info.describe_image();
  EXPECT_GE(info.image_ptx_arch, 75) << info.describe_image();
  EXPECT_LE(info.effective_capability(), info.device_capability());
  EXPECT_LE(info.effective_capability(), info.image_ptx_arch);
}

TEST(KernelImage, DtypeAndPreflightFollowTheImage) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const CudaDeviceInfo info = cuda_device_info(0);
  const bool bf16 = info.effective_capability() >= 80;
  EXPECT_EQ(choose_compute_dtype("auto", Device::cuda(0)), bf16 ? DType::kBF16 : DType::kF16) << info.describe_image();
  EXPECT_EQ(choose_compute_dtype("bfloat16", Device::cuda(0)), bf16 ? DType::kBF16 : DType::kF16);
  auto backend = make_cuda_backend(0, DType::kBF16);
  if (bf16) {
    EXPECT_NO_THROW(backend->check_supported({128, 32, 8}));
    return;
  }
  try {
    backend->check_supported({128, 32, 8});
    FAIL() << "bf16 accepted with kernels loaded as " << info.describe_image();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    if (info.device_capability() >= 80) {
      EXPECT_NE(e.message().find("kernels loaded as"), std::string::npos) << e.message();
    }
  }
  EXPECT_NO_THROW(make_cuda_backend(0, DType::kF16)->check_supported({128, 32, 8}));
}

}  // namespace
}  // namespace tessera::backend
