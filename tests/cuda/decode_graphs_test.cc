// Decode steps through recorded CUDA graphs against the same steps launched
// kernel by kernel (label gpu). Several sequences of different lengths decode
// together while the batch shrinks and grows across buckets (5 -> 3 -> 9
// sequences: buckets 8, 4, 16) and their block tables widen past block
// boundaries, so graphs are recorded, replayed, padded and made stale. Both
// models get the same tokens every step (the eager model's argmax), and every
// step's logits are compared. The split plan of a graph covers its whole
// block-table width, so its attention sums in a different order: close, not
// bit-equal. A planted bug — padding rows writing into a block a sequence
// owns — must be caught by the same comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "../compare.h"
#include "backend/backend.h"
#include "model/decode_graphs.h"
#include "model/random_weights.h"
#include "model/transformer.h"

namespace tessera {
namespace {

constexpr int64_t kBlockSize = 16;
constexpr int64_t kBlocksPerSeq = 16;  // room for 256 positions each
constexpr int64_t kSequences = 9;

model::ModelSpec small_spec() {
  model::ModelSpec spec = model::random_model_spec("100m");  // 768 hidden, 12/12 heads (head_dim 64)
  spec.num_layers = 2;
  spec.num_kv_heads = 4;  // GQA 3
  spec.vocab_size = 1000;
  return spec;
}

struct Sequence {
  std::vector<int32_t> tokens;  // everything written to the cache so far, plus the next input last
  int64_t computed = 0;         // tokens in the cache
};

// Block table of sequence s: its own kBlocksPerSeq blocks, as many as `length` positions need.
std::vector<int32_t> table_of(int64_t s, int64_t length) {
  std::vector<int32_t> table((length + kBlockSize - 1) / kBlockSize);
  std::iota(table.begin(), table.end(), static_cast<int32_t>(s * kBlocksPerSeq));
  return table;
}

model::ForwardBatch step_batch(const std::vector<Sequence>& seqs, const std::vector<int64_t>& active, bool prefill) {
  model::ForwardBatch batch;
  auto& a = batch.attention;
  a.query_start = {0};
  size_t width = 1;
  std::vector<std::vector<int32_t>> tables;
  for (int64_t s : active) {
    const Sequence& q = seqs[s];
    const int64_t begin = prefill ? 0 : q.computed, end = static_cast<int64_t>(q.tokens.size());
    for (int64_t p = begin; p < end; ++p) {
      batch.token_ids.push_back(q.tokens[p]);
      a.positions.push_back(static_cast<int32_t>(p));
    }
    a.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
    batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
    tables.push_back(table_of(s, end));
    width = std::max(width, tables.back().size());
  }
  a.max_blocks_per_seq = static_cast<int32_t>(width);
  for (auto& t : tables) {
    t.resize(width, 0);
    a.block_tables.insert(a.block_tables.end(), t.begin(), t.end());
  }
  return batch;
}

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

struct Outcome {
  testing::Closeness worst;  // the largest deviation of any decode step's logits
  int64_t graph_replays = 0;
  bool graphs_on = false;
};

// Decodes with graphs (model `graphs`) and without (`eager`); `spare_override`
// >= 0 points the graph model's padding rows at that block instead of its spare one.
Outcome run_schedule(DType dtype, int64_t spare_override) {
  const model::ModelSpec spec = small_spec();
  auto graph_backend = backend::make_cuda_backend(0, dtype);
  auto eager_backend = backend::make_cuda_backend(0, dtype);
  auto graphs = model::make_random_transformer(spec, *graph_backend, 7);
  auto eager = model::make_random_transformer(spec, *eager_backend, 7);
  eager->set_graphs_enabled(false);
  EXPECT_TRUE(graphs->graphs_enabled());
  backend::PagedKvCache graph_cache = graphs->allocate_cache(kSequences * kBlocksPerSeq, kBlockSize);
  backend::PagedKvCache eager_cache = eager->allocate_cache(kSequences * kBlocksPerSeq, kBlockSize);
  EXPECT_EQ(graph_cache.spare_block, kSequences * kBlocksPerSeq);
  if (spare_override >= 0) graph_cache.spare_block = spare_override;

  const int64_t lengths[kSequences] = {3, 17, 64, 65, 130, 1, 31, 33, 100};
  std::vector<Sequence> seqs(kSequences);
  for (int64_t s = 0; s < kSequences; ++s) {
    for (int64_t i = 0; i < lengths[s]; ++i) seqs[s].tokens.push_back(static_cast<int32_t>((s * 131 + i * 17) % 1000));
  }
  auto prefill = [&](const std::vector<int64_t>& which) {
    for (int64_t s : which) {
      const model::ForwardBatch batch = step_batch(seqs, {s}, true);
      Tensor logits = eager->forward(batch, eager_cache);
      graphs->forward(batch, graph_cache);
      seqs[s].computed = static_cast<int64_t>(seqs[s].tokens.size());
      seqs[s].tokens.push_back(argmax(logits.data<float>(), logits.dim(1)));
    }
  };

  Outcome outcome;
  auto decode = [&](const std::vector<int64_t>& active, int steps) {
    for (int step = 0; step < steps; ++step) {
      const model::ForwardBatch batch = step_batch(seqs, active, false);
      Tensor want = eager->forward(batch, eager_cache);
      Tensor got = graphs->forward(batch, graph_cache);
      testing::Closeness c = testing::compare(got.data<float>(), want.data<float>(), want.numel());
      outcome.worst.max_abs = std::max(outcome.worst.max_abs, c.max_abs);
      outcome.worst.rel_norm = std::max(outcome.worst.rel_norm, c.rel_norm);
      for (size_t i = 0; i < active.size(); ++i) {
        Sequence& q = seqs[active[i]];
        q.computed = static_cast<int64_t>(q.tokens.size());
        q.tokens.push_back(argmax(want.data<float>() + i * want.dim(1), want.dim(1)));
      }
    }
  };
  prefill({0, 1, 2, 3, 4});
  decode({0, 1, 2, 3, 4}, 10);  // bucket 8
  decode({0, 2, 4}, 10);        // bucket 4
  prefill({5, 6, 7, 8});
  decode({0, 1, 2, 3, 4, 5, 6, 7, 8}, 20);  // bucket 16; sequence 4 passes 160 positions (width 16)
  decode({3}, 5);                           // bucket 1
  outcome.graph_replays = graphs->graph_replays();
  outcome.graphs_on = graphs->graphs_enabled();
  return outcome;
}

double bound_max_abs(DType dtype) { return dtype == DType::kF32 ? 1e-4 : 0.08; }
double bound_rel_norm(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

class DecodeGraphs : public ::testing::TestWithParam<DType> {};

TEST_P(DecodeGraphs, EqualKernelByKernelDecode) {
  if (backend::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const DType dtype = GetParam() == DType::kBF16 ? backend::choose_compute_dtype("bfloat16", Device::cuda(0)) : GetParam();
  const Outcome outcome = run_schedule(dtype, -1);
  EXPECT_TRUE(outcome.graphs_on) << "a recording failed and turned graphs off";
  // 45 decode steps in 4 buckets: each bucket's first step runs eagerly and is
  // recorded, a bucket 16 makes the smaller ones' buffers move (recorded
  // again at their next step), every other step is a replay.
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
