// Decode steps by recorded device graphs (CUDA graphs), one per shape bucket.
//
// A decode step launches a few hundred small kernels, and at batch 1 the
// host's launches and the gaps between kernels cost about a tenth of the
// step. A graph replays them all with one launch. Graphs are recorded per
// bucket of (sequences, block-table width): a step is padded up to its
// bucket — padding sequences read token 0 at position 0 and write their keys
// and values into the cache's spare block, and every block table is padded
// with that block, which attention never reads (it stops at each sequence's
// length) — and its logits land in one buffer every graph writes (rows
// [0, bucket)), of which the real rows are returned; a bucket larger than
// the buffer replaces it, and the graphs recorded over the old one go.
//
// The first step of a bucket runs as usual (its results are the step's; it
// also makes the backend's one-time choices, such as the GEMV variant of each
// shape), then its inputs are staged and the same forward is recorded. Later
// steps stage their inputs (uploads, no kernels) and replay. A step of the
// same bucket as the step before it, with nothing else run between them (the
// model tells of its other forwards, forget_staged_inputs; a backend's upload
// buffers serve the one model that runs on it at a time), differs from it
// only in its token ids, positions and block tables: where the model can
// stage just those (StageInputs), the staging pass over every layer (tens of
// microseconds of host time a step, while the device waits) is skipped.
// Graphs go stale when an input buffer of the backend moves
// (graph_generation) and are recorded again. A recording that fails turns
// graphs off with a warning: the forward runs as before.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>

#include "backend/backend.h"
#include "backend/paged_kv.h"
#include "core/tensor.h"
#include "model/forward_batch.h"

namespace tessera::model {

// The bucket a step of `num_seqs` decode sequences is padded to: 1, 2, 4, 8,
// then multiples of 8 up to 64, multiples of 32 after: a decode step reads
// every weight whatever its rows, so a few padding rows cost little.
int64_t decode_graph_batch_bucket(int64_t num_seqs);
// The block-table width a step is padded to: the next power of two.
int64_t decode_graph_width_bucket(int64_t max_blocks_per_seq);

class DecodeGraphs {
 public:
  // Runs a (padded) batch's forward, writing logits [num_tokens, vocab_rows] f32 into `logits`.
  using Forward = std::function<void(const ForwardBatch& batch, Tensor& logits)>;
  // Uploads a (padded) step's token ids and attention batch only, the
  // backend staging; false where the step needs more (the full staging
  // pass then runs), such as a model's RoPE frequencies that depend on the length.
  using StageInputs = std::function<bool(const ForwardBatch& batch)>;

  static constexpr int64_t kMaxSequences = 512;  // larger decode steps run without a graph

  DecodeGraphs(backend::Backend& backend, int64_t vocab_rows);

  // Whether a graph can run `batch`: a decode step (one new token per
  // sequence, each with a logits row) of at most kMaxSequences sequences,
  // over a cache with a spare block, while graphs are on.
  bool applies(const ForwardBatch& batch, const backend::PagedKvCache& cache) const;
  // The step's logits [num_seqs, vocab_rows] f32 on the device, a view of the
  // graphs' buffer valid until the next step.
  Tensor run(const ForwardBatch& batch, const backend::PagedKvCache& cache, const Forward& forward,
             const StageInputs& stage_inputs = nullptr);
  // A forward ran without a graph: the backend's input buffers hold its
  // inputs, so the next replay stages in full.
  void forget_staged_inputs() { staged_key_ = Key{-1, -1}; }

  bool enabled() const { return enabled_; }
  void set_enabled(bool enabled);
  // Graphs held now, and steps run by a replay so far (tests, logs).
  int64_t recorded() const { return static_cast<int64_t>(graphs_.size()); }
  int64_t replays() const { return replays_; }
  // Host seconds the replayed steps spent before their graph ran on the
  // device: staging the inputs and launching the graph. The device waits
  // through it (a step's inputs are the previous step's tokens), so it is
  // part of every batch-1 step's time (bench decode reports it).
  double replay_host_seconds() const { return replay_host_seconds_; }

 private:
  using Key = std::pair<int64_t, int64_t>;  // (sequences, block-table width)

  // Runs `padded`'s forward with the backend staging: its inputs uploaded, no kernel launched.
  void stage(const ForwardBatch& padded, Tensor& logits, const Forward& forward);
  // stage_inputs(padded) with the backend staging; whether it staged the step.
  bool stage_only_inputs(const ForwardBatch& padded, const StageInputs& stage_inputs);
  // work() with the backend staging, which ends however work() does.
  void with_staging(const std::function<void()>& work);
  // Records `padded`'s forward for `key` into `logits`; null (graphs off, logged) when the backend cannot.
  std::unique_ptr<backend::DeviceGraph> record(const Key& key, const ForwardBatch& padded, Tensor& logits,
                                               const Forward& forward);

  backend::Backend& backend_;
  int64_t vocab_rows_;
  bool enabled_ = true;
  uint64_t generation_ = 0;  // the backend's graph_generation the graphs were recorded at
  Key staged_key_{-1, -1};   // the bucket whose step's inputs the backend's buffers hold, if any
  int64_t replays_ = 0;
  double replay_host_seconds_ = 0;
  Tensor logits_;  // [largest bucket so far, vocab_rows] f32: every graph's rows [0, its bucket)
  std::map<Key, std::unique_ptr<backend::DeviceGraph>> graphs_;
};

}  // namespace tessera::model
