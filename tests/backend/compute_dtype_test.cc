// decide_compute_dtype: the dtype from the device's compute capability, the
// architecture of the kernel image loaded for it, and --dtype. The case that
// matters is a build holding only compute_75 PTX (what a T4 gets) JIT-compiled
// on a newer GPU: it must compute as a T4 would, in f16, and say why.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/error.h"

namespace tessera::backend {
namespace {

TEST(DecideComputeDtype, Bf16WhereDeviceAndImageHaveIt) {
  for (int image : {0, 80, 90}) {
    ComputeDtypeDecision d = decide_compute_dtype("auto", 90, image);
    EXPECT_EQ(d.dtype, DType::kBF16) << image;
    EXPECT_TRUE(d.message.empty()) << d.message;
    EXPECT_EQ(decide_compute_dtype("bfloat16", 90, image).dtype, DType::kBF16);
  }
  EXPECT_EQ(decide_compute_dtype("auto", 80, 80).dtype, DType::kBF16);
  EXPECT_EQ(decide_compute_dtype("auto", 86, 80).dtype, DType::kBF16);  // sm_80 SASS runs on 8.6
}

TEST(DecideComputeDtype, APtxOnlyT4BuildOnAnH200ComputesInF16WithAWarning) {
  for (const char* requested : {"auto", "bfloat16"}) {
    ComputeDtypeDecision d = decide_compute_dtype(requested, 90, 75);
    EXPECT_EQ(d.dtype, DType::kF16) << requested;
    EXPECT_TRUE(d.warn) << requested;
    EXPECT_EQ(d.message, "kernels built for compute capability 7.5 only; bf16 needs 8.0: computing in float16");
  }
}

TEST(DecideComputeDtype, ARealT4ComputesInF16) {
  ComputeDtypeDecision autod = decide_compute_dtype("auto", 75, 75);
  EXPECT_EQ(autod.dtype, DType::kF16);
  EXPECT_FALSE(autod.warn);  // what auto means on that GPU: informed, not warned
  EXPECT_NE(autod.message.find("7.5"), std::string::npos) << autod.message;
  ComputeDtypeDecision asked = decide_compute_dtype("bfloat16", 75, 0);
  EXPECT_EQ(asked.dtype, DType::kF16);
  EXPECT_TRUE(asked.warn);
  EXPECT_NE(asked.message.find("no bfloat16"), std::string::npos) << asked.message;
}

TEST(DecideComputeDtype, ExplicitF16AndF32AreKeptAndUnknownNamesRefused) {
  for (int image : {0, 75, 90}) {
    EXPECT_EQ(decide_compute_dtype("float16", 90, image).dtype, DType::kF16);
    EXPECT_EQ(decide_compute_dtype("float32", 90, image).dtype, DType::kF32);
    EXPECT_TRUE(decide_compute_dtype("float32", 90, image).message.empty());
  }
  try {
    decide_compute_dtype("fp8", 90, 90);
    FAIL() << "fp8 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
}

TEST(CudaDeviceInfo, EffectiveCapabilityIsTheLowerOfDeviceAndImage) {
  CudaDeviceInfo info;
  info.compute_major = 9;
  info.compute_minor = 0;
  info.image_ptx_arch = 75;
  info.image_binary_arch = 90;  // compute_75 PTX JIT-compiled for sm_90
  EXPECT_EQ(info.effective_capability(), 75);
  EXPECT_FALSE(info.supports_bf16());
  EXPECT_EQ(info.describe_image(), "PTX from compute_75, JIT-compiled for sm_90");
  info.image_ptx_arch = 90;
  EXPECT_EQ(info.effective_capability(), 90);
  EXPECT_TRUE(info.supports_bf16());
  EXPECT_EQ(info.describe_image(), "SASS for sm_90");
  info.image_ptx_arch = info.image_binary_arch = 0;  // nothing in the build runs here
  info.built_archs = "75-virtual";
  EXPECT_EQ(info.effective_capability(), 0);
  EXPECT_FALSE(info.supports_bf16());
  EXPECT_NE(info.describe_image().find("built for 75-virtual"), std::string::npos) << info.describe_image();
}

}  // namespace
}  // namespace tessera::backend
