// Transformer: the decoder-only forward shared by every supported
// architecture (pre-norm attention and SwiGLU MLP blocks, RoPE, GQA).
//
// One forward takes a flat batch of new tokens from any number of sequences,
// each at its own positions; it writes their keys and values into the paged
// cache and attends over everything cached before. So a prefill, a chunk of a
// prefill, or one decode token per sequence are the same call.
//
// Under tensor parallelism each rank runs this same forward on its shard
// (shard.h) with a communicator: attention on its heads, the MLP on its
// intermediate units, an all-reduce after o and after down, and the LM head on
// its vocabulary rows followed by an all-gather, after which any rank can
// return the full logits or sample them on its device. Nothing here depends
// on which rank it is; the caller picks the rank that returns them.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/paged_kv.h"
#include "comm/communicator.h"
#include "model/decode_graphs.h"
#include "model/forward_batch.h"
#include "model/layers/rope.h"
#include "model/model_spec.h"
#include "model/shard.h"
#include "model/weights.h"

namespace tessera::model {

// Called with every named intermediate when set (tests compare layer by layer).
using TraceFn = std::function<void(const std::string& name, int64_t layer, const Tensor& value)>;

class Transformer {
 public:
  // The whole model on one device.
  Transformer(ModelSpec spec, ModelWeights weights, backend::Backend& backend);
  // One tensor-parallel rank: `weights` is the shard's, `comm` (not owned,
  // outlives the forwards) connects the shard.world_size ranks.
  Transformer(ModelSpec spec, TpShard shard, ModelWeights weights, backend::Backend& backend,
              comm::Communicator* comm);

  const ModelSpec& spec() const { return spec_; }  // the whole model's
  const TpShard& shard() const { return shard_; }
  const ModelWeights& weights() const { return weights_; }  // as uploaded to the backend
  backend::Backend& backend() { return backend_; }

  // Replaces the communicator (after a failed group was built again).
  void set_communicator(comm::Communicator* comm);

  // A paged cache of `num_blocks` blocks of `block_size` tokens, every layer,
  // in kv_cache_format(); under tensor parallelism of this rank's KV heads.
  // Where decode graphs run, one block more past them is the cache's
  // spare_block (their padding rows).
  backend::PagedKvCache allocate_cache(int64_t num_blocks, int64_t block_size);
  // How caches allocated from now on store keys and values (paged_kv.h);
  // the compute dtype by default, int8 for --quant-policy 8, int4 for 4.
  void set_kv_cache_format(backend::KvCacheFormat format) { kv_cache_format_ = format; }
  backend::KvCacheFormat kv_cache_format() const { return kv_cache_format_; }

  // Returns host f32 logits [logit_rows.size(), vocab]. Under tensor
  // parallelism any rank may call it; the others call forward_as_peer.
  Tensor forward(const ForwardBatch& batch, backend::PagedKvCache& cache);
  // The same forward, returning only each logits row's token, sampled by the
  // backend where the logits are (backend::Backend::sample_rows); see
  // samples_on_device().
  std::vector<int32_t> forward_sample(const ForwardBatch& batch, backend::PagedKvCache& cache,
                                      const backend::SamplingBatch& sampling);
  // Where forward_sample runs: a backend that samples_rows(), and a
  // vocabulary the ranks split evenly (a padded LM-head shard would put
  // columns past the vocabulary in the rows sampled).
  bool samples_on_device() const {
    return backend_.samples_rows() && shard_.vocab_rows * shard_.world_size == spec_.vocab_size;
  }
  // Tensor parallelism: this rank's part of a forward whose logits another
  // rank returns (forward or forward_sample) — every layer and the logits'
  // all-gather that rank waits on; nothing is copied to the host or kept.
  void forward_as_peer(const ForwardBatch& batch, backend::PagedKvCache& cache);

  void set_trace(TraceFn trace) { trace_ = std::move(trace); }

  // Decode steps by recorded device graphs (decode_graphs.h) where the backend
  // has them and the model runs on one device: on by default, off with
  // TESSERA_CUDA_GRAPHS=0 or here (--eager-mode).
  void set_graphs_enabled(bool enabled);
  bool graphs_enabled() const { return graphs_ && graphs_->enabled(); }
  int64_t graph_replays() const { return graphs_ ? graphs_->replays() : 0; }
  double graph_replay_host_seconds() const { return graphs_ ? graphs_->replay_host_seconds() : 0.0; }

 private:
  // The attention batch every layer's ops take (the model's sliding window set).
  backend::AttentionBatch layer_batch(const backend::AttentionBatch& attention) const;
  // DecodeGraphs::StageInputs: a replayed decode step's token ids and
  // attention batch uploaded (the backend staging); false for a model whose
  // RoPE frequencies depend on the length (dynamic NTK).
  bool stage_step_inputs(const ForwardBatch& batch);
  void trace(const char* name, int64_t layer, const Tensor& value) const {
    if (trace_) trace_(name, layer, value);
  }

  // The forward up to this rank's logits [logit_rows.size(), shard.vocab_rows] f32 on the device.
  Tensor forward_local(const ForwardBatch& batch, backend::PagedKvCache& cache);
  // The layers of one forward, writing logits [logit_rows.size(), shard.vocab_rows] f32 into `logits`.
  void run_layers(const ForwardBatch& batch, backend::PagedKvCache& cache, Tensor& logits);
  void make_graphs();
  // A linear layer (out = fusion's input(x) · Wᵀ + bias): its 4-bit weight
  // when the backend keeps one, else the 16-bit one.
  // Under tensor parallelism a norm's input may have a `pending` partial to
  // add first (add_rms_norm), which it consumes.
  void project(const Tensor& x, backend::LinearFusion fusion, const Tensor& weight,
               const backend::QuantizedWeight& packed, const Tensor& bias, Tensor& out, Tensor* pending = nullptr);
  // residual += a row-parallel layer's output summed over the ranks: on one
  // rank in the product's store; on several the partial is all-reduced and
  // left `pending` for the next norm to add.
  void project_into_residual(const Tensor& x, backend::LinearFusion fusion, const Tensor& weight,
                             const backend::QuantizedWeight& packed, Tensor& residual, Tensor& partial,
                             Tensor& pending);
  // Sums a row-parallel layer's partial outputs over the ranks.
  void all_reduce(Tensor& partial);
  // Every rank's logits [m, shard.vocab_rows] f32 -> [world_size * m,
  // vocab_rows] on this rank's device, rank r's columns of row i at row
  // r * m + i (one rank: `local` itself). The collective every rank joins.
  Tensor all_gather_logits(const Tensor& local);
  // all_gather_logits' parts put together by row, on the device: [m,
  // world_size * vocab_rows], the vocabulary's columns in order, then the
  // padding of an uneven last shard.
  Tensor logits_by_row(const Tensor& gathered, int64_t m);

  ModelSpec spec_;
  TpShard shard_;
  ModelWeights weights_;
  backend::Backend& backend_;
  RopeFrequencies short_rope_;  // the frequencies wherever rope_depends_on_length is false
  comm::Communicator* comm_ = nullptr;
  TraceFn trace_;
  std::unique_ptr<DecodeGraphs> graphs_;  // null without device graphs
  backend::KvCacheFormat kv_cache_format_ = backend::KvCacheFormat::kCompute;
};

// Reads config.json (with `overrides`), picks the architecture, loads and
// checks the weights.
std::unique_ptr<Transformer> load_transformer(const std::filesystem::path& model_dir, backend::Backend& backend,
                                              const SpecOverrides& overrides = {});

// A model opened once, from which every tensor-parallel rank makes its
// shard: the spec and the memory-mapped checkpoint. Each rank assembles the
// canonical weights one part at a time (weights.h), so the host holds a
// layer in f32 per loading rank, never the whole model.
struct HostModel {
  ModelSpec spec;
  const Architecture* architecture = nullptr;
  std::shared_ptr<const Checkpoint> checkpoint;

  // One part's canonical weights (a layer, or kGlobalWeights), assembled and
  // checked now. Safe to call from several threads at once.
  CanonicalWeights part(int64_t part) const;
};

// Reads config.json, picks the architecture and opens the checkpoint; the
// weights are read and checked as each rank uploads them.
HostModel read_host_model(const std::filesystem::path& model_dir, const SpecOverrides& overrides = {});

// Rank comm->rank() of comm->world_size() on `backend`, or the whole model
// when `comm` is null. Throws Error(kInvalidArgument) listing the sizes that
// work when the world size does not split the model (shard.h).
std::unique_ptr<Transformer> make_transformer(const HostModel& model, backend::Backend& backend,
                                              comm::Communicator* comm = nullptr);

}  // namespace tessera::model
