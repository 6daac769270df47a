// Decode steps through recorded CUDA graphs against the same steps launched
// kernel by kernel (label gpu), over the schedule of decode_graph_schedule.h:
// graphs are recorded, replayed, padded and made stale. The split plan of a
// graph covers its whole block-table width, so its attention sums in a
// different order: close, not bit-equal. A planted bug — padding rows writing
// into a block a sequence owns — must be caught by the same comparison.
#include <gtest/gtest.h>

#include "../decode_graph_schedule.h"
#include "backend/backend.h"
#include "model/decode_graphs.h"
#include "model/random_weights.h"
#include "model/transformer.h"

namespace tessera {
namespace {

using testing::kBlocksPerSeq;
using testing::Outcome;

// `spare_override` >= 0: the planted bug of run_decode_schedule.
Outcome run_schedule(DType dtype, int64_t spare_override) {
  const model::ModelSpec spec = testing::small_spec();
  auto graph_backend = backend::make_cuda_backend(0, dtype);
  auto eager_backend = backend::make_cuda_backend(0, dtype);
  auto graphs = model::make_random_transformer(spec, *graph_backend, 7);
  auto eager = model::make_random_transformer(spec, *eager_backend, 7);
  return testing::run_decode_schedule(graphs.get(), eager.get(), spare_override);
}

double bound_max_abs(DType dtype) { return dtype == DType::kF32 ? 1e-4 : 0.08; }
double bound_rel_norm(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

class DecodeGraphs : public ::testing::TestWithParam<DType> {};

TEST_P(DecodeGraphs, EqualKernelByKernelDecode) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const DType dtype = GetParam() == DType::kBF16 ? backend::choose_compute_dtype("bfloat16", Device::cuda(0)) : GetParam();
  const Outcome outcome = run_schedule(dtype, -1);
  EXPECT_TRUE(outcome.graphs_on) << "a recording failed and turned graphs off";
  // 50 decode steps in 5 phases: each phase's first step runs eagerly and is
  // recorded, input buffers that grow make older graphs stale (recorded
  // again at their next step), every other step is a replay (45 at most).
  EXPECT_GE(outcome.graph_replays, 35);
  EXPECT_TRUE(outcome.worst.within(bound_max_abs(dtype), bound_rel_norm(dtype)))
      << dtype_name(dtype) << ": " << outcome.worst.describe();
}

TEST_P(DecodeGraphs, PaddingIntoAnOwnedBlockIsCaught) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const DType dtype = GetParam() == DType::kBF16 ? backend::choose_compute_dtype("bfloat16", Device::cuda(0)) : GetParam();
  // Sequence 1's first block: padding rows write token 0 over its position 0
  // (token 131) while it decodes in bucket 8 beside two padding rows.
  const Outcome outcome = run_schedule(dtype, kBlocksPerSeq);
  EXPECT_FALSE(outcome.worst.within(bound_max_abs(dtype), bound_rel_norm(dtype)))
      << dtype_name(dtype) << ": the planted bug went unseen: " << outcome.worst.describe();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecodeGraphs, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(DecodeGraphBuckets, PadFewRows) {
  for (int64_t n = 1; n <= model::DecodeGraphs::kMaxSequences; ++n) {
    const int64_t bucket = model::decode_graph_batch_bucket(n);
    EXPECT_GE(bucket, n);
    EXPECT_LT(bucket - n, n <= 64 ? 8 : 32) << n;
  }
  EXPECT_EQ(model::decode_graph_width_bucket(1), 1);
  EXPECT_EQ(model::decode_graph_width_bucket(9), 16);
}

}  // namespace
}  // namespace tessera
