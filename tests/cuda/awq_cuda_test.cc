// The W4A16 linear (backend/cuda/w4a16.cu, w4a16_tiles.cu) against
// dequantize-then-GEMM on the CPU (dequantize_weight + the CPU backend's f32
// linear: the judge), over a grid of rows M, outputs N, inputs K and group
// sizes, with and without bias, in f32 (canonical layout, scalar GEMV up to 16
// rows), f16 and bf16 (tensor-core tiles up to 64 rows where k and the group
// are multiples of 64); every row-warps variant of the tensor-core kernel; the
// tiles dequantized bit for bit as the CPU rounds; paired gate | up tiles
// and the SiLU·mul and RMSNorm stores. A flipped nibble is caught. And a
// `lite auto_awq` export of a golden model on the GPU gives the CPU's logits
// and greedy tokens, with and without the fused stores. Skips without a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>

#include "../compare.h"
#include "../test_paths.h"
#include "backend/backend.h"
#include "core/error.h"
#include "backend/cuda/w4a16.h"
#include "backend/cuda/w4_linear.h"
#include "backend/cuda/w4a16_sm90.h"
#include "engine/generate.h"
#include "model/convert/awq_quantize.h"
#include "model/transformer.h"

namespace tessera::backend {
namespace {

struct Bounds {
  double max_abs, rel_norm;
};

// f32 is looser than a plain GEMM: the kernel folds the 128 offset of its
// int-to-float trick out per group (w4a16.cu), which costs about 2^-16 of
// relative precision per 32-input chunk.
Bounds bounds_for(DType dtype) {
  switch (dtype) {
    case DType::kF32: return {2e-3, 2e-4};
    case DType::kF16: return {2e-2, 2e-3};
    default: return {1e-1, 1e-2};
  }
}

QuantizedWeight random_weight(int64_t out, int64_t in, int64_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  QuantizedWeight w;
  w.out_features = out;
  w.in_features = in;
  w.group_size = group;
  w.qweight = Tensor::empty({out, in / 8}, DType::kI32);
  w.scales = Tensor::empty({out, in / group}, DType::kF16);
  w.zeros = Tensor::empty({out, in / group}, DType::kU8);
  for (int64_t i = 0; i < w.qweight.numel(); ++i) w.qweight.data<int32_t>()[i] = static_cast<int32_t>(rng());
  std::uniform_real_distribution<float> scale(0.5f, 1.5f);
  for (int64_t i = 0; i < w.scales.numel(); ++i) {
    static_cast<uint16_t*>(w.scales.raw_data())[i] = f32_to_f16(scale(rng) / std::sqrt(float(in)) / 4.0f);
    w.zeros.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 16);
  }
  return w;
}

// Which weights the upload tiles (host code: runs without a GPU too). The
// kernels find a chunk's group by a shift, so a group must be a power of two
// of 64-input chunks; other sizes keep the canonical layout.
TEST(W4Tiles, OnlyGroupsOfAPowerOfTwoOfChunksAreTiled) {
  EXPECT_TRUE(cuda::w4_tiles_supported(4096, 128));
  EXPECT_TRUE(cuda::w4_tiles_supported(14336, 128));
  EXPECT_TRUE(cuda::w4_tiles_supported(4096, 64));
  EXPECT_TRUE(cuda::w4_tiles_supported(4096, 256));
  EXPECT_FALSE(cuda::w4_tiles_supported(4608, 192)) << "3 chunks a group";
  EXPECT_FALSE(cuda::w4_tiles_supported(4096, 32)) << "half a chunk a group";
  EXPECT_FALSE(cuda::w4_tiles_supported(96, 32)) << "k not whole chunks";
  EXPECT_FALSE(cuda::w4_tiles_supported(4160, 128)) << "k not whole groups";
}

// Whether the Hopper GEMM's second copy of the 4-bit weights is made (host
// code: runs without a GPU too): only where both copies leave a quarter of
// the device for the KV cache, and what a memory plan made before the load
// gave the KV cache and the steps.
TEST(W4Linear, SecondCopiesOnlyWhereTheyLeaveAQuarterOfTheDeviceAndThePlansShare) {
  constexpr size_t kGiB = size_t{1} << 30;
  EXPECT_TRUE(cuda::second_copies_fit(79 * kGiB, 80 * kGiB, 5 * kGiB, 4 * kGiB)) << "a 7B export on 80 GiB";
  EXPECT_TRUE(cuda::second_copies_fit(79 * kGiB, 80 * kGiB, 13 * kGiB, 11 * kGiB)) << "a 20B export on 80 GiB";
  EXPECT_FALSE(cuda::second_copies_fit(79 * kGiB, 80 * kGiB, 38 * kGiB, 35 * kGiB)) << "a 70B export on 80 GiB";
  EXPECT_FALSE(cuda::second_copies_fit(20 * kGiB, 24 * kGiB, 12 * kGiB, 10 * kGiB)) << "fits once, not twice";
  EXPECT_TRUE(cuda::second_copies_fit(60 * kGiB, 80 * kGiB, 30 * kGiB, 10 * kGiB)) << "a quarter exactly";
  EXPECT_FALSE(cuda::second_copies_fit(60 * kGiB, 80 * kGiB, 30 * kGiB, 10 * kGiB + 1)) << "a byte less";
  // A plan made before the load (tensor-parallel ranks) keeps what it gave the KV cache.
  EXPECT_TRUE(cuda::second_copies_fit(79 * kGiB, 80 * kGiB, 5 * kGiB, 4 * kGiB, 70 * kGiB)) << "the plan's 70 GiB";
  EXPECT_FALSE(cuda::second_copies_fit(79 * kGiB, 80 * kGiB, 5 * kGiB, 4 * kGiB, 70 * kGiB + 1)) << "a byte more";
  EXPECT_TRUE(cuda::second_copies_fit(60 * kGiB, 80 * kGiB, 30 * kGiB, 10 * kGiB, 1 * kGiB)) << "the quarter rules";
  // Two ranks of a 7B export on one H100 (same-device) at --cache-max-entry-count
  // 0.99: each rank saw room for its copies beside the plan's KV cache
  // without counting the other's share, and the second rank's cache
  // allocation then ran out of memory. The other rank's share and copies count.
  const size_t free = 78 * kGiB + kGiB / 2, total = 79 * kGiB, rank_weights = 2433 * kGiB / 1000,
               rank_copies = 1730 * kGiB / 1000, plan = 72 * kGiB;
  EXPECT_TRUE(cuda::second_copies_fit(free, total, rank_weights, rank_copies, plan, 1)) << "a rank alone on it";
  EXPECT_FALSE(cuda::second_copies_fit(free, total, rank_weights, rank_copies, plan, 2)) << "two ranks";
  EXPECT_TRUE(cuda::second_copies_fit(free, total, rank_weights, rank_copies, 60 * kGiB, 2)) << "at 0.8";
}

TEST(W4Linear, PinsParseAndMalformedOnesAreNamed) {
  const auto pins = cuda::parse_w4_pins("4096x4096:12,6144x4096:1");
  ASSERT_EQ(pins.size(), 2u);
  EXPECT_EQ(pins.at({4096, 4096}), 12u);
  EXPECT_EQ(pins.at({6144, 4096}), 1u);
  for (const char* bad : {"4096x4096", "4096:12", "x4096:1", "4096x4096:12junk", "0x4096:1", "4096x4096:1,,"}) {
    try {
      cuda::parse_w4_pins(bad);
      ADD_FAILURE() << bad << " parsed";
    } catch (const tessera::Error& e) {
      EXPECT_EQ(e.kind(), tessera::ErrorKind::kInvalidArgument) << bad;
      EXPECT_NE(std::string(e.what()).find("TESSERA_W4_PIN"), std::string::npos) << e.what();
    }
  }
}

class AwqCudaVsCpu : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
    dtype_ = GetParam();
    // The GEMV wherever it applies (up to 16 rows), not the faster path of
    // each shape: the grid judges the kernel; 17 and 40 rows take dequantize + cuBLASLt.
    setenv("TESSERA_W4_GEMV", "1", 1);
    cuda_ = make_cuda_backend(0, dtype_);
    unsetenv("TESSERA_W4_GEMV");
    cpu_ = make_cpu_backend();
  }

  Tensor random(Shape shape, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> values(shape_numel(shape));
    for (float& v : values) v = dist(rng);
    return Tensor::from_f32(values, shape).to_dtype(dtype_).to_f32();
  }

  // The GPU's result and the CPU's, both host f32 [m, n].
  std::pair<Tensor, Tensor> run(const QuantizedWeight& host, const QuantizedWeight& uploaded_from, int64_t m,
                                bool with_bias, uint32_t seed) {
    const int64_t n = host.out_features, k = host.in_features;
    Tensor x = random({m, k}, seed);
    Tensor bias = with_bias ? random({n}, seed + 1) : Tensor();
    Tensor expected = Tensor::empty({m, n}, DType::kF32);
    cpu_->linear(x, dequantize_weight(host), bias, expected);
    QuantizedWeight device = cuda_->upload_quantized_weight(uploaded_from);
    Tensor gpu_out = Tensor::empty({m, n}, dtype_, cuda_->allocator());
    cuda_->linear_quantized(cuda_->upload_weight(x), device, with_bias ? cuda_->upload_weight(bias) : Tensor(),
                            gpu_out);
    return {cuda_->to_host_f32(gpu_out), expected};
  }

  template <typename F>
  void dispatch_16bit(F&& f) {
    if (dtype_ == DType::kF16) f(__half{});
    else f(__nv_bfloat16{});
  }

  // The tensor-core kernels the backend may time for m rows of k inputs:
  // the register and stage pipelines by row warps (1, 2, 4, 8), the
  // group-sum kernels where they apply, then the wide-row kernels (1 and 2
  // row warps of two row tiles).
  struct Variant {
    cuda::W4Pipeline pipeline;
    int row_warps;   // or the index of kW4GroupSumsKernels
    std::string name;
  };
  static std::vector<Variant> tensor_core_variants(int64_t m, int64_t k, int64_t group) {
    std::vector<Variant> variants;
    for (auto [pipeline, name] : {std::pair{cuda::W4Pipeline::kRegisterBatches, "register batches"},
                                  std::pair{cuda::W4Pipeline::kRegisterDouble, "double register batches"},
                                  std::pair{cuda::W4Pipeline::kSharedStages, "shared-memory stages"}}) {
      for (int row_warps : {1, 2, 4, 8}) {
        variants.push_back({pipeline, row_warps, std::string(name) + ", row warps " + std::to_string(row_warps)});
      }
    }
    if (cuda::w4_group_sums_supported(m, k, group)) {
      for (int i = 0; i < static_cast<int>(std::size(cuda::kW4GroupSumsKernels)); ++i) {
        variants.push_back({cuda::W4Pipeline::kGroupSums, i, "group sums #" + std::to_string(i)});
      }
    }
    for (int row_warps : {1, 2}) {
      variants.push_back({cuda::W4Pipeline::kWideRows, row_warps,
                          "two row tiles a warp, row warps " + std::to_string(row_warps)});
    }
    return variants;
  }

  // out (+)= x · W (+ bias) by one variant on an upload's tiles, stored as
  // `store` and `norms` say; waits for it.
  void launch(const Variant& v, const Tensor& gx, const QuantizedWeight& device, const Tensor& gbias, int64_t m,
              Tensor& out, cuda::W4Store store, bool accumulate = false, const cuda::W4Norms& norms = {}) {
    const int64_t n = device.out_features, k = device.in_features, group = device.group_size;
    cuda_->synchronize();  // uploads and the allocation are ordered on the backend's stream
    dispatch_16bit([&](auto tag) {
      using T = decltype(tag);
      const auto* x = static_cast<const T*>(gx.raw_data());
      const auto* tiles = static_cast<const uint32_t*>(device.qweight.raw_data());
      const auto* scale_zero = static_cast<const uint32_t*>(device.scales.raw_data());
      const auto* bias = gbias.defined() ? static_cast<const T*>(gbias.raw_data()) : nullptr;
      auto* y = static_cast<T*>(out.raw_data());
      if (v.pipeline == cuda::W4Pipeline::kGroupSums) {
        cuda::launch_w4a16_group_sums<T>(x, tiles, scale_zero, bias, m, n, k, group, v.row_warps, y, nullptr,
                                         accumulate, store, norms);
      } else if (v.pipeline == cuda::W4Pipeline::kWideRows) {
        cuda::launch_w4a16_wide<T>(x, tiles, scale_zero, bias, m, n, k, group, v.row_warps, y, nullptr, accumulate,
                                   store, norms);
      } else {
        cuda::launch_w4a16_mma<T>(x, tiles, scale_zero, bias, m, n, k, group, v.row_warps, v.pipeline, y, nullptr,
                                  accumulate, store, norms);
      }
    });
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the legacy stream, which waits for the backend's
  }

  // Random x [m, k] and bias [n] on the GPU, and the CPU's x · W + bias.
  struct Operands {
    Tensor expected, gx, gbias;
  };
  Operands operands(const QuantizedWeight& w, int64_t m, uint32_t seed) {
    Tensor x = random({m, w.in_features}, seed), bias = random({w.out_features}, seed + 1);
    Tensor expected = Tensor::empty({m, w.out_features}, DType::kF32);
    cpu_->linear(x, dequantize_weight(w), bias, expected);
    return {expected, cuda_->upload_weight(x), cuda_->upload_weight(bias)};
  }

  // How many weights of an upload's tiles, dequantized on the device, differ
  // from the CPU's (q - zero) * scale rounded to the activation type.
  int64_t weights_dequantized_otherwise(const QuantizedWeight& host, const QuantizedWeight& device, bool paired) {
    const int64_t n = host.out_features, k = host.in_features, group = host.group_size;
    Tensor dense = Tensor::empty({n, k}, dtype_, cuda_->allocator());
    cuda_->synchronize();
    dispatch_16bit([&](auto tag) {
      using T = decltype(tag);
      cuda::launch_w4_dequantize_tiles<T>(static_cast<const uint32_t*>(device.qweight.raw_data()),
                                          static_cast<const uint32_t*>(device.scales.raw_data()), n, k, group,
                                          static_cast<T*>(dense.raw_data()), nullptr, paired);
    });
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Tensor got = cuda_->to_host_f32(dense), want = dequantize_weight(host).to_dtype(dtype_).to_f32();
    int64_t wrong = 0;
    for (int64_t i = 0; i < want.numel(); ++i) wrong += got.data<float>()[i] != want.data<float>()[i];
    return wrong;
  }

  DType dtype_ = DType::kF32;
  std::unique_ptr<Backend> cuda_, cpu_;
};

TEST_P(AwqCudaVsCpu, LinearEqualsDequantizeThenGemmOverAGrid) {
  struct Shape2 {
    int64_t n, k;
  };
  const Shape2 shapes[] = {{8, 32}, {24, 64}, {264, 256}, {1000, 384}, {130, 1024}, {512, 14336}, {4096, 4096}};
  const int64_t rows[] = {1, 2, 3, 4, 5, 8, 13, 16, 17, 40, 64, 65};
  uint32_t seed = 1;
  int cases = 0;
  for (const Shape2& s : shapes) {
    for (int64_t group : {32, 64, 128}) {
      if (s.k % group != 0) continue;
      const QuantizedWeight w = random_weight(s.n, s.k, group, seed++);
      for (int64_t m : rows) {
        if (s.n * s.k > 4096 * 1024 && m > 16 && m != 17 && m != 65) continue;  // keep the large shapes quick
        const bool bias = (seed % 2) == 0;
        auto [got, want] = run(w, w, m, bias, seed++);
        auto c = testing::compare(got.data<float>(), want.data<float>(), static_cast<size_t>(want.numel()));
        const Bounds b = bounds_for(dtype_);
        EXPECT_TRUE(c.within(b.max_abs, b.rel_norm))
            << "m " << m << " n " << s.n << " k " << s.k << " group " << group << (bias ? " +bias" : "") << " ("
            << dtype_name(dtype_) << "): " << c.describe();
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 100);
}

TEST_P(AwqCudaVsCpu, AFlippedNibbleIsCaught) {
  const QuantizedWeight w = random_weight(64, 256, 64, 7);
  QuantizedWeight planted = w;
  planted.qweight = Tensor::empty(w.qweight.shape(), DType::kI32);
  std::copy_n(w.qweight.data<int32_t>(), w.qweight.numel(), planted.qweight.data<int32_t>());
  // Row 5: the top bit of every nibble flipped, so each of its weights moves by
  // 8 steps (a whole output column wrong by about 1, far beyond every bound).
  for (int64_t word = 0; word < 32; ++word) planted.qweight.data<int32_t>()[5 * 32 + word] ^= static_cast<int32_t>(0x88888888u);
  for (int64_t m : {1, 16, 17}) {
    auto [got, want] = run(w, planted, m, false, 11);
    auto c = testing::compare(got.data<float>(), want.data<float>(), static_cast<size_t>(want.numel()));
    const Bounds b = bounds_for(dtype_);
    EXPECT_FALSE(c.within(b.max_abs, b.rel_norm)) << "m " << m << ": a wrong weight went unnoticed: " << c.describe();
  }
}

// The tensor-core kernel called directly with each row-warps count and
// weight pipeline (the backend runs only the fastest), on tiled uploads of shapes with k and the
// group multiples of 64 and n not a multiple of 16.
TEST_P(AwqCudaVsCpu, EveryRowWarpsVariantOfTheTensorCoreKernelMatches) {
  if (dtype_ == DType::kF32) GTEST_SKIP() << "f32 activations keep the canonical layout";
  if (cuda_device_info(0).effective_capability() < 80) GTEST_SKIP() << "no mma.sync kernel image below 8.0";
  struct Case {
    int64_t n, k, group;
  };
  const Case cases[] = {{40, 64, 64},       {1000, 384, 128},   {130, 1024, 64},
                        {264, 1024, 256},   {4104, 4096, 128},  {512, 14336, 128}};
  uint32_t seed = 100;
  for (const Case& s : cases) {
    const QuantizedWeight w = random_weight(s.n, s.k, s.group, seed++);
    const QuantizedWeight device = cuda_->upload_quantized_weight(w);
    ASSERT_TRUE(device.backend_layout) << "an 8.0+ kernel image with 16-bit activations uploads tiles";
    for (int64_t m : {1, 3, 8, 9, 16, 29, 64}) {
      const auto [expected, gx, gbias] = operands(w, m, seed++);
      // Within the group-sum kernels' shared memory and group sizes.
      const bool group_sums = m <= 8 && m * s.k <= 16384 && s.group <= 128;
      ASSERT_EQ(cuda::w4_group_sums_supported(m, s.k, s.group), group_sums) << "m " << m << " k " << s.k;
      ASSERT_TRUE(cuda::w4_wide_supported(m, 1) && cuda::w4_wide_supported(m, 2)) << "m " << m;
      for (const Variant& v : tensor_core_variants(m, s.k, s.group)) {
        Tensor out = Tensor::empty({m, s.n}, dtype_, cuda_->allocator());
        launch(v, gx, device, gbias, m, out, cuda::W4Store::kRows);
        Tensor got = cuda_->to_host_f32(out);
        auto c = testing::compare(got.data<float>(), expected.data<float>(), static_cast<size_t>(expected.numel()));
        const Bounds b = bounds_for(dtype_);
        EXPECT_TRUE(c.within(b.max_abs, b.rel_norm)) << "m " << m << " n " << s.n << " k " << s.k << " group "
                                                     << s.group << ", " << v.name << ": " << c.describe();
      }
    }
  }
}

// A weight of gate | up halves uploads as paired tiles (each tile's rows 0-7
// gate rows, 8-15 the matching up rows). Every tensor-core variant stores
// its rows back in gate | up order (against the CPU), and its SiLU·mul store
// gives the bits of that stored product followed by the backend's SiLU·mul
// op; the tiles dequantize to the canonical rows.
TEST_P(AwqCudaVsCpu, PairedGateUpTilesStoreTheRowsOrSiluMulOfThem) {
  if (dtype_ == DType::kF32) GTEST_SKIP() << "f32 activations keep the canonical layout";
  if (cuda_device_info(0).effective_capability() < 80) GTEST_SKIP() << "no mma.sync kernel image below 8.0";
  struct Case {
    int64_t n, k, group;
  };
  uint32_t seed = 500;
  for (const Case& s : {Case{32, 64, 64}, Case{1008, 384, 128}, Case{256, 1024, 64}, Case{3584, 4096, 128}}) {
    QuantizedWeight w = random_weight(s.n, s.k, s.group, seed++);
    w.gate_up_halves = true;
    const QuantizedWeight device = cuda_->upload_quantized_weight(w);
    ASSERT_TRUE(cuda_->stores_silu_mul(device, 64)) << "n " << s.n << ": gate | up halves upload as paired tiles";
    EXPECT_FALSE(cuda_->stores_silu_mul(device, 65)) << "more rows than the tensor-core kernels take";
    QuantizedWeight plain = w;
    plain.gate_up_halves = false;
    EXPECT_FALSE(cuda_->stores_silu_mul(cuda_->upload_quantized_weight(plain), 1));

    EXPECT_EQ(weights_dequantized_otherwise(w, device, true), 0) << "n " << s.n << ": paired tiles dequantize to "
                                                                   << "other weights";

    for (int64_t m : {1, 3, 8, 9, 16, 29, 64}) {
      const auto [expected, gx, gbias] = operands(w, m, seed++);
      for (const Variant& v : tensor_core_variants(m, s.k, s.group)) {
        Tensor rows = Tensor::empty({m, s.n}, dtype_, cuda_->allocator());
        launch(v, gx, device, gbias, m, rows, cuda::W4Store::kPairedRows);
        Tensor got = cuda_->to_host_f32(rows);
        auto c = testing::compare(got.data<float>(), expected.data<float>(), static_cast<size_t>(expected.numel()));
        const Bounds b = bounds_for(dtype_);
        EXPECT_TRUE(c.within(b.max_abs, b.rel_norm))
            << "paired rows, m " << m << " n " << s.n << " k " << s.k << ", " << v.name << ": " << c.describe();

        Tensor stored = Tensor::empty({m, s.n / 2}, dtype_, cuda_->allocator());
        Tensor by_op = Tensor::empty({m, s.n / 2}, dtype_, cuda_->allocator());
        launch(v, gx, device, gbias, m, stored, cuda::W4Store::kSiluMul);
        cuda_->silu_mul(rows, by_op);
        Tensor got_stored = cuda_->to_host_f32(stored), want_stored = cuda_->to_host_f32(by_op);
        int64_t differ = 0;
        for (int64_t i = 0; i < want_stored.numel(); ++i) {
          differ += got_stored.data<float>()[i] != want_stored.data<float>()[i];
        }
        EXPECT_EQ(differ, 0) << "SiLU·mul store, m " << m << " n " << s.n << " k " << s.k << ", " << v.name
                             << ": values differ from the product stored, then the op";
      }
    }
  }
}

// An RMSNorm formed across two products (w4a16.h, W4Norms), by every
// tensor-core variant at 1-16 rows. The producer adds into a residual r as
// it would without the norm (bit for bit) and leaves r ∘ g and each 16-row
// tile's sum of r² (bit for bit against the host's, in the same order); the
// consumer reading them, plain or with paired gate | up tiles storing SiLU·mul,
// gives the CPU's rms_norm(r) then the product (and SiLU·mul).
TEST_P(AwqCudaVsCpu, NormsFormedAheadInTheStoreGiveTheNormsProduct) {
  if (dtype_ == DType::kF32) GTEST_SKIP() << "f32 activations keep the canonical layout";
  if (cuda_device_info(0).effective_capability() < 80) GTEST_SKIP() << "no mma.sync kernel image below 8.0";
  struct Case {
    int64_t hidden, producer_k, consumer_n, group;
  };
  uint32_t seed = 700;
  for (const Case& s : {Case{256, 384, 512, 128}, Case{1024, 1024, 96, 64}, Case{4096, 4096, 1024, 128}}) {
    const QuantizedWeight producer = random_weight(s.hidden, s.producer_k, s.group, seed++);
    QuantizedWeight consumer = random_weight(s.consumer_n, s.hidden, s.group, seed++);
    const QuantizedWeight producer_device = cuda_->upload_quantized_weight(producer);
    const QuantizedWeight consumer_device = cuda_->upload_quantized_weight(consumer);
    consumer.gate_up_halves = true;
    const QuantizedWeight paired_device = cuda_->upload_quantized_weight(consumer);
    ASSERT_TRUE(cuda_->forms_norm_ahead(producer_device, 16) && cuda_->forms_norm_ahead(consumer_device, 16));
    EXPECT_FALSE(cuda_->forms_norm_ahead(producer_device, 17)) << "more rows than the stores' norms take";
    const Tensor dense = dequantize_weight(consumer);
    for (int64_t m : {1, 3, 8, 9, 16}) {
      Tensor x = random({m, s.producer_k}, seed), r0 = random({m, s.hidden}, seed + 1);
      Tensor g = random({s.hidden}, seed + 2);
      Tensor bias = random({s.consumer_n}, seed + 3);
      seed += 4;
      const Tensor gx = cuda_->upload_weight(x), gg = cuda_->upload_weight(g), gbias = cuda_->upload_weight(bias);
      for (const Variant& v : tensor_core_variants(m, s.producer_k, s.group)) {
        // The producer, plain and forming the norm ahead, each adding into r0.
        Tensor plain = cuda_->upload_weight(r0), residual = cuda_->upload_weight(r0);
        Tensor formed = Tensor::empty({m, s.hidden}, dtype_, cuda_->allocator());
        Tensor sums = Tensor::empty({m, s.hidden / 16}, DType::kF32, cuda_->allocator());
        launch(v, gx, producer_device, Tensor(), m, plain, cuda::W4Store::kRows, true);
        cuda::W4Norms ahead;
        ahead.ahead_weight = gg.raw_data();
        ahead.ahead_formed = formed.raw_data();
        ahead.ahead_sums = static_cast<float*>(sums.raw_data());
        launch(v, gx, producer_device, Tensor(), m, residual, cuda::W4Store::kRows, true, ahead);
        const Tensor r = cuda_->to_host_f32(residual), want_r = cuda_->to_host_f32(plain);
        const Tensor got_formed = cuda_->to_host_f32(formed), got_sums = cuda_->to_host_f32(sums);
        Tensor want_formed = Tensor::empty({m, s.hidden}, DType::kF32);
        for (int64_t i = 0; i < r.numel(); ++i) {
          want_formed.data<float>()[i] = r.data<float>()[i] * g.data<float>()[i % s.hidden];
        }
        want_formed = want_formed.to_dtype(dtype_).to_f32();
        int64_t wrong_r = 0, wrong_formed = 0, wrong_sums = 0;
        for (int64_t i = 0; i < r.numel(); ++i) {
          wrong_r += r.data<float>()[i] != want_r.data<float>()[i];
          wrong_formed += got_formed.data<float>()[i] != want_formed.data<float>()[i];
        }
        for (int64_t tile = 0; tile < m * s.hidden / 16; ++tile) {
          float squares[16], sum = 0.0f;
          for (int64_t i = 0; i < 16; ++i) squares[i] = r.data<float>()[tile * 16 + i] * r.data<float>()[tile * 16 + i];
          for (float square : squares) sum += square;  // the kernel's order
          wrong_sums += got_sums.data<float>()[tile] != sum;
        }
        EXPECT_EQ(wrong_r + wrong_formed + wrong_sums, 0)
            << "m " << m << " hidden " << s.hidden << ", " << v.name << ": " << wrong_r << " residual values, "
            << wrong_formed << " of r ∘ g and " << wrong_sums << " tile sums differ";

        // The CPU: rms_norm(r) · W + bias, and SiLU·mul of it.
        Tensor normed = Tensor::empty({m, s.hidden}, DType::kF32);
        Tensor want = Tensor::empty({m, s.consumer_n}, DType::kF32);
        Tensor want_gated = Tensor::empty({m, s.consumer_n / 2}, DType::kF32);
        cpu_->rms_norm(r, g, 1e-5f, normed);
        cpu_->linear(normed, dense, bias, want);
        cpu_->silu_mul(want, want_gated);
        cuda::W4Norms read;
        read.input_sums = static_cast<const float*>(sums.raw_data());
        read.eps = 1e-5f;
        for (const Variant& cv : tensor_core_variants(m, s.hidden, s.group)) {
          Tensor out = Tensor::empty({m, s.consumer_n}, dtype_, cuda_->allocator());
          Tensor gated = Tensor::empty({m, s.consumer_n / 2}, dtype_, cuda_->allocator());
          launch(cv, formed, consumer_device, gbias, m, out, cuda::W4Store::kRows, false, read);
          launch(cv, formed, paired_device, gbias, m, gated, cuda::W4Store::kSiluMul, false, read);
          const Bounds b = bounds_for(dtype_);
          for (auto [got, expected, what] : {std::tuple{cuda_->to_host_f32(out), want, "rows"},
                                             std::tuple{cuda_->to_host_f32(gated), want_gated, "SiLU·mul"}}) {
            auto c =
                testing::compare(got.data<float>(), expected.data<float>(), static_cast<size_t>(expected.numel()));
            EXPECT_TRUE(c.within(b.max_abs, b.rel_norm)) << what << ", m " << m << " hidden " << s.hidden << ", "
                                                         << v.name << " then " << cv.name << ": " << c.describe();
          }
        }
      }
    }
  }
}

// Backend::fused_linear on 4-bit weights against the CPU's separate ops on
// the dequantized weight: rms_norm(x) or silu(gate)·up formed by its op, then
// every path (the tensor-core kernel up to 64 rows, dequantize + cuBLASLt at
// 65, the scalar GEMV for f32 activations) adding into out in its own store.
TEST_P(AwqCudaVsCpu, FusedLinearFormsTheInputAndAddsIntoTheResidual) {
  struct Case {
    int64_t n, k, group;
  };
  uint32_t seed = 300;
  for (const Case& s : {Case{1000, 384, 128}, Case{130, 1024, 64}, Case{264, 4096, 128}}) {
    const QuantizedWeight w = random_weight(s.n, s.k, s.group, seed++);
    const QuantizedWeight device = cuda_->upload_quantized_weight(w);
    const Tensor dense = dequantize_weight(w);
    for (auto input : {LinearFusion::Input::kRmsNorm, LinearFusion::Input::kSiluMul, LinearFusion::Input::kAsIs}) {
      for (bool accumulate : {false, true}) {
        for (int64_t m : {1, 9, 64, 65}) {
          const int64_t width = input == LinearFusion::Input::kSiluMul ? 2 * s.k : s.k;
          Tensor x = random({m, width}, seed), g = random({s.k}, seed + 1), start = random({m, s.n}, seed + 2);
          seed += 3;
          LinearFusion fusion;
          fusion.input = input;
          fusion.norm_weight = &g;
          fusion.eps = 1e-5f;
          fusion.accumulate = accumulate;
          Tensor expected = start.to_f32();  // a copy
          cpu_->fused_linear(x, fusion, dense, QuantizedWeight(), Tensor(), expected);
          Tensor gg = cuda_->upload_weight(g), out = cuda_->upload_weight(start);
          fusion.norm_weight = &gg;
          cuda_->fused_linear(cuda_->upload_weight(x), fusion, Tensor(), device, Tensor(), out);
          Tensor got = cuda_->to_host_f32(out);
          auto c = testing::compare(got.data<float>(), expected.data<float>(), static_cast<size_t>(expected.numel()));
          const Bounds b = bounds_for(dtype_);
          EXPECT_TRUE(c.within(b.max_abs, b.rel_norm))
              << "input " << static_cast<int>(input) << (accumulate ? " +=" : "") << " m " << m << " n " << s.n
              << " k " << s.k << " (" << dtype_name(dtype_) << "): " << c.describe();
        }
      }
    }
  }
}

// The tiles dequantized (the path of more than 64 rows) give each weight as
// the CPU's (q - zero) * scale rounded to the activation type, bit for bit.
TEST_P(AwqCudaVsCpu, TilesDequantizeToTheCanonicalWeights) {
  if (dtype_ == DType::kF32) GTEST_SKIP() << "f32 activations keep the canonical layout";
  if (cuda_device_info(0).effective_capability() < 80) GTEST_SKIP() << "no mma.sync kernel image below 8.0";
  for (auto [n, k, group] : {std::tuple<int64_t, int64_t, int64_t>{40, 64, 64}, {1000, 384, 128}, {130, 1024, 64}}) {
    const QuantizedWeight w = random_weight(n, k, group, static_cast<uint32_t>(n + k));
    const QuantizedWeight device = cuda_->upload_quantized_weight(w);
    EXPECT_EQ(weights_dequantized_otherwise(w, device, false), 0)
        << "n " << n << " k " << k << " group " << group << ": weights differ";
  }
}

// The Hopper GEMM (CUTLASS's mixed-input kernel, w4a16_sm90.cu) called
// directly on an upload's copy for it, every token tile with its tiles
// whole, by stream-K and with k split, rows from one to past two of its
// largest tiles, plain and added into a sum; then the same copy with 64 bytes
// overwritten (256 weights of a few rows set to 15) must fail the comparison.
TEST_P(AwqCudaVsCpu, HopperGemmEqualsDequantizeThenGemm) {
  if (dtype_ == DType::kF32) GTEST_SKIP() << "the Hopper GEMM takes 16-bit activations";
  if (!cuda::w4_sm90_built()) GTEST_SKIP() << "this build holds no Hopper 4-bit GEMM";
  if (cuda_device_info(0).device_capability() != 90) GTEST_SKIP() << "sm_90a code runs on compute capability 9.0 only";
  struct Case {
    int64_t n, k, group;
  };
  const Case cases[] = {{256, 512, 128}, {384, 1024, 64}, {1024, 4096, 128}, {4096, 256, 256}};
  // m random rows (and a random `start` it adds to when it accumulates) and
  // the CPU's x · W (+ start) of them.
  struct Product {
    Tensor x, start, want;
  };
  auto product_of = [&](const QuantizedWeight& w, int64_t m, bool accumulate, uint32_t seed) {
    const int64_t n = w.out_features, k = w.in_features;
    Product p{random({m, k}, seed), random({m, n}, seed + 1), Tensor::empty({m, n}, DType::kF32)};
    cpu_->linear(p.x, dequantize_weight(w), Tensor(), p.want);
    if (accumulate) {
      for (int64_t i = 0; i < p.want.numel(); ++i) p.want.data<float>()[i] += p.start.data<float>()[i];
    }
    return p;
  };
  // The GEMM of one variant on the device against the CPU's product.
  auto compare_variant = [&](const QuantizedWeight& w, const QuantizedWeight& device, const Product& p,
                             cuda::W4Sm90Variant variant, bool accumulate) {
    const int64_t m = p.x.dim(0), n = w.out_features, k = w.in_features;
    Tensor gx = cuda_->upload_weight(p.x), out = cuda_->upload_weight(p.start);
    cuda_->synchronize();
    dispatch_16bit([&](auto tag) {
      using T = decltype(tag);
      const size_t bytes = cuda::w4a16_sm90_workspace_bytes<T>(m, n, k, w.group_size, variant);
      void* workspace = nullptr;
      if (bytes) {  // all bits set: the launch must clear the locks it uses
        ASSERT_EQ(cudaMalloc(&workspace, bytes), cudaSuccess);
        ASSERT_EQ(cudaMemset(workspace, 0xff, bytes), cudaSuccess);
      }
      cuda::launch_w4a16_sm90<T>(static_cast<const T*>(gx.raw_data()),
                                 static_cast<const uint8_t*>(device.gemm_qweight.raw_data()),
                                 static_cast<const T*>(device.gemm_scales.raw_data()),
                                 static_cast<const T*>(device.gemm_zeros.raw_data()), m, n, k, w.group_size, variant,
                                 workspace, bytes, static_cast<T*>(out.raw_data()), nullptr, accumulate);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (workspace) {
        EXPECT_EQ(cudaFree(workspace), cudaSuccess);
      }
    });
    Tensor got = cuda_->to_host_f32(out);
    return testing::compare(got.data<float>(), p.want.data<float>(), static_cast<size_t>(p.want.numel()));
  };
  uint32_t seed = 100;
  int compared = 0;
  const Bounds b = bounds_for(dtype_);
  for (const Case& cs : cases) {
    const QuantizedWeight w = random_weight(cs.n, cs.k, cs.group, seed++);
    const size_t copies_before = cuda_->quantized_copy_bytes();
    QuantizedWeight device = cuda_->upload_quantized_weight(w);
    ASSERT_TRUE(device.gemm_qweight.defined()) << "no Hopper copy of [" << cs.n << ", " << cs.k << "]";
    // The copy's nibbles, and its scales and zeros in the activation type.
    EXPECT_EQ(cuda_->quantized_copy_bytes() - copies_before,
              static_cast<size_t>(cs.n * cs.k / 2 + 2 * (cs.k / cs.group) * cs.n * 2));
    for (int64_t m : {1, 7, 16, 17, 64, 100, 300}) {
      const bool accumulate = (seed % 3) == 0;
      const Product p = product_of(w, m, accumulate, seed);
      seed += 2;
      for (int tile : cuda::kW4Sm90TokenTiles) {
        for (int splits : cuda::kW4Sm90Splits) {
          auto c = compare_variant(w, device, p, {tile, splits}, accumulate);
          EXPECT_TRUE(c.within(b.max_abs, b.rel_norm))
              << "m " << m << " n " << cs.n << " k " << cs.k << " group " << cs.group << " token tile " << tile
              << " splits " << splits << (accumulate ? " +=" : "") << " (" << dtype_name(dtype_)
              << "): " << c.describe();
          ++compared;
        }
      }
    }
    if (cs.n == 256) {  // the plant, once, whole tiles and split
      ASSERT_EQ(cudaMemset(static_cast<uint8_t*>(device.gemm_qweight.raw_data()) + 4096, 0xff, 64), cudaSuccess);
      const Product p = product_of(w, 17, false, 5);
      for (int splits : {cuda::kW4Sm90WholeTiles, 2}) {
        auto c = compare_variant(w, device, p, {32, splits}, false);
        EXPECT_FALSE(c.within(b.max_abs, b.rel_norm))
            << "overwritten weights went unnoticed, splits " << splits << ": " << c.describe();
      }
    }
  }
  EXPECT_EQ(compared, 4 * 7 * 4 * 4);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AwqCudaVsCpu, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The golden model's prompt, made 20 tokens long: more than 16 rows, so a
// prefill takes the dequantize + cuBLASLt path where the GEMV stops at 16.
std::vector<int32_t> prompt_of_20(const std::filesystem::path& golden) {
  nlohmann::json expected = nlohmann::json::parse(std::ifstream(golden / "expected.json"));
  auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
  while (prompt.size() < 20) prompt.push_back(prompt[prompt.size() % 7]);
  return prompt;
}

// Teacher-forced logits of every prompt position, one prefill.
Tensor prefill_logits(model::Transformer& m, const std::vector<int32_t>& prompt) {
  backend::PagedKvCache cache = m.allocate_cache(2, 16);
  model::ForwardBatch batch;
  batch.token_ids = prompt;
  batch.attention.query_start = {0, static_cast<int32_t>(prompt.size())};
  batch.attention.block_tables = {0, 1};
  batch.attention.max_blocks_per_seq = 2;
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.attention.positions.push_back(static_cast<int32_t>(i));
    batch.logit_rows.push_back(static_cast<int32_t>(i));
  }
  return m.forward(batch, cache);
}

// A quantized golden model on the GPU (f32 activations) against the CPU,
// prefill through the dequantize + cuBLASLt path when the prompt is long
// enough and decode through the GEMV.
TEST(AwqCudaModel, AutoAwqExportOfAGoldenModelMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const auto golden = testing::fixtures_dir() / "golden" / "internlm2_gqa2";
  const auto dir = std::filesystem::temp_directory_path() / "tessera-awq-cuda-model";
  model::write_awq_model(golden, dir, 32);
  const std::vector<int32_t> prompt = prompt_of_20(golden);
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend(0, DType::kF32);
  auto cpu_model = model::load_transformer(dir, *cpu);
  auto gpu_model = model::load_transformer(dir, *gpu);
  Tensor want_logits = prefill_logits(*cpu_model, prompt), got_logits = prefill_logits(*gpu_model, prompt);
  auto c = testing::compare(got_logits.data<float>(), want_logits.data<float>(),
                            static_cast<size_t>(want_logits.numel()));
  EXPECT_TRUE(c.within(5e-3, 5e-4)) << "prefill logits: " << c.describe();
  engine::GenerateOptions options;
  options.max_new_tokens = 16;
  EXPECT_EQ(engine::generate(*gpu_model, prompt, options).tokens, engine::generate(*cpu_model, prompt, options).tokens);
  std::filesystem::remove_all(dir);
}

// The same export in bf16 on the tensor-core tiles: with gate_up's paired
// tiles every layer's SiLU·mul is formed in the gate_up product's store (20
// prompt rows and each decode row are within the kernels' 64), against the
// same GPU with plain tiles and SiLU·mul as its own op (TESSERA_W4_PAIRS=0).
// Each side times its own kernels, whose sums may add in another order, so
// the bound is bf16's, far below what a swapped gate and up would give.
TEST(AwqCudaModel, SiluMulInTheGateUpStoreEqualsTheSeparateOp) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  if (cuda_device_info(0).effective_capability() < 80) GTEST_SKIP() << "no mma.sync kernel image below 8.0";
  const auto golden = testing::fixtures_dir() / "golden" / "internlm2_gqa2";
  const auto dir = std::filesystem::temp_directory_path() / "tessera-awq-cuda-paired";
  model::write_awq_model(golden, dir, 64);
  const std::vector<int32_t> prompt = prompt_of_20(golden);
  auto logits_of = [&](bool pairs) {
    if (!pairs) setenv("TESSERA_W4_PAIRS", "0", 1);
    auto gpu = make_cuda_backend(0, DType::kBF16);
    unsetenv("TESSERA_W4_PAIRS");
    auto model = model::load_transformer(dir, *gpu);
    EXPECT_EQ(gpu->stores_silu_mul(model->weights().layers[0].gate_up_w4, 1), pairs);
    return prefill_logits(*model, prompt);
  };
  Tensor separate = logits_of(false), in_store = logits_of(true);
  auto c = testing::compare(in_store.data<float>(), separate.data<float>(), static_cast<size_t>(separate.numel()));
  EXPECT_TRUE(c.within(5e-2, 1e-2)) << "prefill logits: " << c.describe();
  std::filesystem::remove_all(dir);
}

// RMSNorm formed ahead on golden models in bf16 on the tiles: a prefill of
// 16 rows takes it for every norm but layer 0's attention norm (the o and down
// projections form the next norm's input, gate_up and the next layer's qkv
// read it), against the same GPU with every norm by its op
// (TESSERA_W4_NORMS=0). qwen2_bias: qkv's bias is added after the scale.
TEST(AwqCudaModel, NormsFormedAheadEqualTheNormOps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  if (cuda_device_info(0).effective_capability() < 80) GTEST_SKIP() << "no mma.sync kernel image below 8.0";
  for (const char* name : {"internlm2_gqa2", "qwen2_bias"}) {
    const auto golden = testing::fixtures_dir() / "golden" / name;
    const auto dir = std::filesystem::temp_directory_path() / "tessera-awq-cuda-norms";
    model::write_awq_model(golden, dir, 64);
    std::vector<int32_t> prompt = prompt_of_20(golden);
    prompt.resize(cuda::kW4NormRows);
    auto logits_of = [&](bool ahead) {
      if (!ahead) setenv("TESSERA_W4_NORMS", "0", 1);
      auto gpu = make_cuda_backend(0, DType::kBF16);
      unsetenv("TESSERA_W4_NORMS");
      auto model = model::load_transformer(dir, *gpu);
      const QuantizedWeight& o = model->weights().layers[0].o_w4;
      EXPECT_EQ(gpu->forms_norm_ahead(o, cuda::kW4NormRows), ahead) << name;
      EXPECT_FALSE(gpu->forms_norm_ahead(o, cuda::kW4NormRows + 1)) << name;
      return prefill_logits(*model, prompt);
    };
    Tensor by_ops = logits_of(false), ahead = logits_of(true);
    auto c = testing::compare(ahead.data<float>(), by_ops.data<float>(), static_cast<size_t>(by_ops.numel()));
    EXPECT_TRUE(c.within(5e-2, 1e-2)) << name << " prefill logits: " << c.describe();
    std::filesystem::remove_all(dir);
  }
}

// The same exports with every tiled product through the Hopper GEMM
// (TESSERA_W4_SM90=1: its copy's rows in canonical order, SiLU·mul by the op
// after a product of its own, qwen2_bias's bias added after it), against the
// tiles' kernels (TESSERA_W4_SM90=0), prefill and greedy decode. In f16: the
// GEMM rounds each weight to the activation type (q · scale + zero, with
// -zero · scale rounded too), which in bf16 moves these models' logits by
// 1.6-1.8 % (an H100), against the tiles' exact (q - zero) and f16 scale.
TEST(AwqCudaModel, HopperGemmEqualsTheTilesKernels) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  if (!cuda::w4_sm90_built()) GTEST_SKIP() << "this build holds no Hopper 4-bit GEMM";
  if (cuda_device_info(0).device_capability() != 90) GTEST_SKIP() << "sm_90a code runs on compute capability 9.0 only";
  for (const char* name : {"internlm2_gqa2", "qwen2_bias"}) {
    const auto golden = testing::fixtures_dir() / "golden" / name;
    const auto dir = std::filesystem::temp_directory_path() / "tessera-awq-cuda-sm90";
    model::write_awq_model(golden, dir, 64);
    const std::vector<int32_t> prompt = prompt_of_20(golden);
    std::vector<int32_t> tokens[2];
    auto logits_of = [&](bool sm90) {
      setenv("TESSERA_W4_SM90", sm90 ? "1" : "0", 1);
      auto gpu = make_cuda_backend(0, DType::kF16);
      unsetenv("TESSERA_W4_SM90");
      auto model = model::load_transformer(dir, *gpu);
      EXPECT_EQ(model->weights().layers[0].gate_up_w4.gemm_qweight.defined(), sm90) << name;
      engine::GenerateOptions options;
      options.max_new_tokens = 12;
      tokens[sm90] = engine::generate(*model, prompt, options).tokens;
      return prefill_logits(*model, prompt);
    };
    Tensor tiles = logits_of(false), sm90 = logits_of(true);
    auto c = testing::compare(sm90.data<float>(), tiles.data<float>(), static_cast<size_t>(tiles.numel()));
    EXPECT_TRUE(c.within(5e-2, 1e-2)) << name << " prefill logits: " << c.describe();
    EXPECT_EQ(tokens[1], tokens[0]) << name;
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace tessera::backend
