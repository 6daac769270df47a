// A decode schedule that moves a batch between CUDA-graph buckets, run on two
// models side by side: one replaying decode graphs (model/decode_graphs.h),
// one launching kernel by kernel. Nine sequences of different lengths decode
// while the batch shrinks and grows (5 -> 3 -> 3 after prefills -> 9 -> 3 -> 1
// sequences: buckets 8, 4, 4 replayed after forwards that uploaded other
// inputs, 16, 4 again after the logits buffer grew for 16, then 1) and their
// block tables widen past block boundaries. Both models
// get the same tokens every step (the eager model's argmax) and every step's
// logits are compared. Used by tests/cuda (the CUDA backend) and tests/model
// (a recording test double on the CPU).
#pragma once

#include <algorithm>
#include <numeric>
#include <vector>

#include "compare.h"
#include "model/random_weights.h"
#include "model/transformer.h"

namespace tessera::testing {

inline constexpr int64_t kBlockSize = 16;
inline constexpr int64_t kBlocksPerSeq = 16;  // room for 256 positions each
inline constexpr int64_t kSequences = 9;

inline model::ModelSpec small_spec() {
  model::ModelSpec spec = model::random_model_spec("100m");  // 768 hidden, 12/12 heads (head_dim 64)
  spec.num_layers = 2;
  spec.num_kv_heads = 4;  // GQA 3
  spec.vocab_size = 1000;
  return spec;
}

struct ScheduledSequence {
  std::vector<int32_t> tokens;  // everything written to the cache so far, plus the next input last
  int64_t computed = 0;         // tokens in the cache
};

// Block table of sequence s: its own kBlocksPerSeq blocks, as many as `length` positions need.
inline std::vector<int32_t> table_of(int64_t s, int64_t length) {
  std::vector<int32_t> table((length + kBlockSize - 1) / kBlockSize);
  std::iota(table.begin(), table.end(), static_cast<int32_t>(s * kBlocksPerSeq));
  return table;
}

inline model::ForwardBatch step_batch(const std::vector<ScheduledSequence>& seqs, const std::vector<int64_t>& active, bool prefill) {
  model::ForwardBatch batch;
  auto& a = batch.attention;
  a.query_start = {0};
  size_t width = 1;
  std::vector<std::vector<int32_t>> tables;
  for (int64_t s : active) {
    const ScheduledSequence& q = seqs[s];
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

inline int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

struct Outcome {
  Closeness worst;  // the largest deviation of any decode step's logits
  int64_t graph_replays = 0;
  double replay_host_seconds = 0;  // the graphs model's host time before its replays ran
  bool graphs_on = false;
};

// Decodes with graphs (`graphs`) and without (`eager`), two models of the same
// weights; `spare_override` >= 0 points the graph model's padding rows at that
// block instead of its spare one (a planted bug).
inline Outcome run_decode_schedule(model::Transformer* graphs, model::Transformer* eager, int64_t spare_override) {
  eager->set_graphs_enabled(false);
  EXPECT_TRUE(graphs->graphs_enabled());
  backend::PagedKvCache graph_cache = graphs->allocate_cache(kSequences * kBlocksPerSeq, kBlockSize);
  backend::PagedKvCache eager_cache = eager->allocate_cache(kSequences * kBlocksPerSeq, kBlockSize);
  EXPECT_EQ(graph_cache.spare_block, kSequences * kBlocksPerSeq);
  if (spare_override >= 0) graph_cache.spare_block = spare_override;

  const int64_t lengths[kSequences] = {3, 17, 64, 65, 130, 1, 31, 33, 100};
  std::vector<ScheduledSequence> seqs(kSequences);
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
      Closeness c = compare(got.data<float>(), want.data<float>(), want.numel());
      outcome.worst.max_abs = std::max(outcome.worst.max_abs, c.max_abs);
      outcome.worst.rel_norm = std::max(outcome.worst.rel_norm, c.rel_norm);
      for (size_t i = 0; i < active.size(); ++i) {
        ScheduledSequence& q = seqs[active[i]];
        q.computed = static_cast<int64_t>(q.tokens.size());
        q.tokens.push_back(argmax(want.data<float>() + i * want.dim(1), want.dim(1)));
      }
    }
  };
  prefill({0, 1, 2, 3, 4});
  decode({0, 1, 2, 3, 4}, 10);  // bucket 8
  decode({0, 2, 4}, 10);        // bucket 4
  prefill({6});          // a 31-token prompt: no graph, other inputs uploaded
  decode({0, 2, 4}, 3);  // bucket 4 right after it: replayed, its inputs staged in full
  prefill({5, 7, 8});
  decode({0, 1, 2, 3, 4, 5, 6, 7, 8}, 20);  // bucket 16; sequence 4 passes 160 positions (width 16)
  decode({0, 2, 4}, 5);                     // bucket 4 again, recorded again over the larger logits buffer
  decode({3}, 5);                           // bucket 1
  outcome.graph_replays = graphs->graph_replays();
  outcome.replay_host_seconds = graphs->graph_replay_host_seconds();
  outcome.graphs_on = graphs->graphs_enabled();
  return outcome;
}

}  // namespace tessera::testing
