#include "model/transformer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "model/arch/architecture.h"
#include "model/layers/rope.h"
#include "model/loader/checkpoint.h"
#include "model/loader/hf_config.h"

namespace tessera::model {

namespace {
bool graphs_allowed_by_environment() {
  const char* setting = std::getenv("TESSERA_CUDA_GRAPHS");
  return setting == nullptr || std::string(setting) != "0";
}
}  // namespace

Transformer::Transformer(ModelSpec spec, ModelWeights weights, backend::Backend& backend)
    : spec_(std::move(spec)),
      shard_(make_tp_shard(spec_, 0, 1)),
      weights_(std::move(weights)),
      backend_(backend),
      short_rope_(rope_frequencies(spec_, 1)) {
  make_graphs();
}

Transformer::Transformer(ModelSpec spec, TpShard shard, ModelWeights weights, backend::Backend& backend,
                         comm::Communicator* comm)
    : spec_(std::move(spec)),
      shard_(shard),
      weights_(std::move(weights)),
      backend_(backend),
      short_rope_(rope_frequencies(spec_, 1)) {
  set_communicator(comm);
  make_graphs();
}

void Transformer::make_graphs() {
  // Collectives wait on the host between kernels, so only a model on one device replays graphs.
  if (backend_.supports_graphs() && shard_.world_size == 1 && graphs_allowed_by_environment()) {
    graphs_ = std::make_unique<DecodeGraphs>(backend_, shard_.vocab_rows);
  }
}

void Transformer::set_graphs_enabled(bool enabled) {
  if (graphs_) graphs_->set_enabled(enabled);
}

void Transformer::set_communicator(comm::Communicator* comm) {
  if (shard_.world_size > 1) {
    TESSERA_CHECK(comm != nullptr && comm->world_size() == shard_.world_size && comm->rank() == shard_.rank);
  }
  comm_ = comm;
}

void Transformer::all_reduce(Tensor& partial) {
  if (shard_.world_size > 1) comm_->all_reduce_sum(partial);
}

Tensor Transformer::all_gather_logits(const Tensor& local) {
  if (shard_.world_size == 1) return local;
  const int64_t m = local.dim(0), world = shard_.world_size;
  Tensor gathered = Tensor::empty({world * m, shard_.vocab_rows}, DType::kF32, backend_.allocator());
  comm_->all_gather(local, gathered);
  return gathered;
}

Tensor Transformer::logits_by_row(const Tensor& gathered, int64_t m) {
  const int64_t world = shard_.world_size, rows = shard_.vocab_rows;
  // One row (a decode step of one sequence): the parts already follow each other.
  if (world == 1 || m == 1) return gathered.reshape({m, world * rows});
  std::vector<int32_t> order;  // [m * world]: row i's part from rank r is gathered row r * m + i
  order.reserve(m * world);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < world; ++r) order.push_back(static_cast<int32_t>(r * m + i));
  }
  Tensor by_row = Tensor::empty({m * world, rows}, DType::kF32, backend_.allocator());
  backend_.gather_rows(gathered, order, by_row);
  return by_row.reshape({m, world * rows});
}

void Transformer::project(const Tensor& x, backend::LinearFusion fusion, const Tensor& weight,
                          const backend::QuantizedWeight& packed, const Tensor& bias, Tensor& out, Tensor* pending) {
  if (shard_.world_size > 1 && fusion.input != backend::LinearFusion::Input::kAsIs) {
    // Under tensor parallelism the input is formed by its own op: with the
    // norm and SiLU·mul inside the CUDA GEMV, two ranks sharing one GPU timed
    // out at an all-reduce (a cause not found yet); formed apart, they pass.
    const bool silu = fusion.input == backend::LinearFusion::Input::kSiluMul;
    TESSERA_CHECK(fusion.scratch != nullptr);
    Tensor input(fusion.scratch->buffer(), 0, x.dtype(), {x.dim(0), silu ? x.dim(1) / 2 : x.dim(1)});
    if (silu) {
      backend_.silu_mul(x, input);
    } else if (pending != nullptr && pending->defined()) {
      Tensor residual = x;  // the same buffer: the add lands in the residual stream
      backend_.add_rms_norm(residual, *pending, *fusion.norm_weight, fusion.eps, input);
      *pending = Tensor();
    } else {
      backend_.rms_norm(x, *fusion.norm_weight, fusion.eps, input);
    }
    fusion.input = backend::LinearFusion::Input::kAsIs;
    backend_.fused_linear(input, fusion, weight, packed, bias, out);
    return;
  }
  backend_.fused_linear(x, fusion, weight, packed, bias, out);
}

void Transformer::project_into_residual(const Tensor& x, backend::LinearFusion fusion, const Tensor& weight,
                                        const backend::QuantizedWeight& packed, Tensor& residual, Tensor& partial,
                                        Tensor& pending) {
  if (shard_.world_size == 1) {
    fusion.accumulate = true;  // the layer's output lands in the residual stream in the product's store
    backend_.fused_linear(x, fusion, weight, packed, Tensor(), residual);
    return;
  }
  project(x, fusion, weight, packed, Tensor(), partial);
  all_reduce(partial);
  pending = partial;  // added by the next norm (add_rms_norm: one kernel for both)
}

backend::PagedKvCache Transformer::allocate_cache(int64_t num_blocks, int64_t block_size) {
  backend::PagedKvCache cache;
  cache.num_blocks = num_blocks;
  cache.block_size = block_size;
  cache.num_kv_heads = shard_.num_kv_heads;
  cache.head_dim = spec_.head_dim;
  // A backend with device graphs gets one spare block past the others for their padding rows.
  if (graphs_) cache.spare_block = num_blocks;
  const int64_t blocks = num_blocks + (graphs_ ? 1 : 0);
  const Shape shape = {blocks, shard_.num_kv_heads, block_size, spec_.head_dim};
  const int bits = backend::kv_code_bits(kv_cache_format_);
  const DType dtype = bits == 8 ? DType::kU8 : bits == 4 ? DType::kU4 : backend_.compute_dtype();
  for (int64_t layer = 0; layer < spec_.num_layers; ++layer) {
    backend::PagedKvLayer kv{Tensor::empty(shape, dtype, backend_.allocator()),
                             Tensor::empty(shape, dtype, backend_.allocator())};
    if (bits != 0) {
      const Shape params = {blocks, shard_.num_kv_heads, block_size, 2};
      kv.key_params = Tensor::empty(params, DType::kF32, backend_.allocator());
      kv.value_params = Tensor::empty(params, DType::kF32, backend_.allocator());
    }
    cache.layers.push_back(std::move(kv));
  }
  return cache;
}

Tensor Transformer::forward(const ForwardBatch& batch, backend::PagedKvCache& cache) {
  const Tensor local = forward_local(batch, cache);
  const int64_t m = local.dim(0), vocab = spec_.vocab_size;
  Tensor wide = backend_.to_host_f32(logits_by_row(all_gather_logits(local), m));
  if (wide.dim(1) == vocab) return wide;
  Tensor logits = Tensor::empty({m, vocab}, DType::kF32);  // an uneven last shard's padding dropped
  for (int64_t i = 0; i < m; ++i) {
    std::copy_n(wide.data<float>() + i * wide.dim(1), vocab, logits.data<float>() + i * vocab);
  }
  return logits;
}

std::vector<int32_t> Transformer::forward_sample(const ForwardBatch& batch, backend::PagedKvCache& cache,
                                                 const backend::SamplingBatch& sampling) {
  if (!samples_on_device()) {
    throw Error(ErrorKind::kInternal, "forward_sample: this model's logits are not sampled where they are");
  }
  const Tensor local = forward_local(batch, cache);
  Tensor logits = logits_by_row(all_gather_logits(local), local.dim(0));
  return backend_.sample_rows(logits, sampling);  // only the ids leave the device
}

void Transformer::forward_as_peer(const ForwardBatch& batch, backend::PagedKvCache& cache) {
  all_gather_logits(forward_local(batch, cache));
}

Tensor Transformer::forward_local(const ForwardBatch& batch, backend::PagedKvCache& cache) {
  if (graphs_ && !trace_ && graphs_->applies(batch, cache)) {
    return graphs_->run(
        batch, cache, [&](const ForwardBatch& padded, Tensor& logits) { run_layers(padded, cache, logits); },
        [&](const ForwardBatch& padded) { return stage_step_inputs(padded); });
  }
  if (graphs_) graphs_->forget_staged_inputs();  // this forward's uploads replace the last step's
  Tensor logits = Tensor::empty({static_cast<int64_t>(batch.logit_rows.size()), shard_.vocab_rows}, DType::kF32,
                                backend_.allocator());
  run_layers(batch, cache, logits);
  return logits;
}

backend::AttentionBatch Transformer::layer_batch(const backend::AttentionBatch& attention) const {
  backend::AttentionBatch batch = attention;
  batch.sliding_window = spec_.sliding_window.value_or(0);
  return batch;
}

bool Transformer::stage_step_inputs(const ForwardBatch& batch) {
  // run_layers' other uploads are the same for every step of a decode
  // bucket: the logit rows (0 .. bucket - 1) and the RoPE frequencies, unless
  // they grow with the length (dynamic NTK past the trained context). Such a
  // model always stages in full: that this step's sequences are all within
  // the context does not say the last step's were, whose frequencies the
  // device still holds.
  if (spec_.rope_scaling.type == RopeScalingType::kDynamic) return false;
  backend_.prepare(layer_batch(batch.attention));
  Tensor residual = Tensor::empty({static_cast<int64_t>(batch.token_ids.size()), spec_.hidden_size},
                                  backend_.compute_dtype(), backend_.allocator());
  backend_.embedding(weights_.embed, batch.token_ids, residual);
  return true;
}

void Transformer::run_layers(const ForwardBatch& batch, backend::PagedKvCache& cache, Tensor& logits) {
  const backend::AttentionBatch& attention = batch.attention;
  const int64_t n = static_cast<int64_t>(batch.token_ids.size());
  TESSERA_CHECK(n == attention.num_tokens());
  TESSERA_CHECK(static_cast<int64_t>(cache.layers.size()) == spec_.num_layers);
  const int64_t hidden = spec_.hidden_size;
  const DType dtype = backend_.compute_dtype();
  Allocator& allocator = backend_.allocator();
  auto activation = [&](int64_t width) { return Tensor::empty({n, width}, dtype, allocator); };

  // Per-sequence RoPE frequencies: dynamic NTK depends on each sequence's length.
  std::vector<float> inv_freq;
  float attention_scaling = 1.0f;
  for (int64_t s = 0; s < attention.num_seqs(); ++s) {
    int32_t last_position = 0;
    for (int32_t t = attention.query_start[s]; t < attention.query_start[s + 1]; ++t) {
      last_position = std::max(last_position, attention.positions[t]);
    }
    // Frequencies of any length but a dynamic NTK one's past the trained
    // context are the same: made once, not head_dim / 2 powers per sequence
    // and step while the device waits for the step (about 30 us at 64
    // sequences).
    RopeFrequencies grown;
    const RopeFrequencies* rope = &short_rope_;
    if (rope_depends_on_length(spec_, last_position + 1)) {
      grown = rope_frequencies(spec_, last_position + 1);
      rope = &grown;
    }
    inv_freq.insert(inv_freq.end(), rope->inv_freq.begin(), rope->inv_freq.end());
    attention_scaling = rope->attention_scaling;
  }
  // Uploaded here: the attention batch, the token ids (embedding), the RoPE
  // frequencies (attention) and the logit rows (gather_rows). A replayed
  // decode step stages only the first two (stage_step_inputs): an input
  // added here must be added there too, or be the same every step.
  const backend::AttentionBatch layer_batch = this->layer_batch(attention);
  backend_.prepare(layer_batch);

  Tensor residual = activation(hidden);                       // [n, hidden]
  Tensor qkv = activation(shard_.qkv_size(spec_.head_dim));   // this rank's heads
  Tensor attn_out = activation(shard_.q_size(spec_.head_dim));
  Tensor gate_up = activation(2 * shard_.intermediate_size);  // this rank's units
  Tensor partial = shard_.world_size > 1 ? activation(hidden) : Tensor();  // a row-parallel layer's share
  Tensor formed = activation(std::max(hidden, shard_.intermediate_size));  // a norm's or SiLU·mul's output, unfused
  Tensor pending;  // tp > 1: the all-reduced partial the next norm adds to the residual
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  auto normed_by = [&](const Tensor& norm_weight) {
    backend::LinearFusion fusion;
    fusion.input = backend::LinearFusion::Input::kRmsNorm;
    fusion.norm_weight = &norm_weight;
    fusion.eps = eps;
    fusion.scratch = &formed;
    return fusion;
  };
  // RMSNorm formed ahead (LinearFusion::norm_ahead): where the backend does
  // it for both products, the one that adds into the residual stream also
  // forms the next norm's input, and the norm's op is left out. Its own
  // buffer: a down projection's input may be in `formed`.
  const bool may_form_ahead = shard_.world_size == 1 && !trace_ && hidden % 16 == 0 &&
                              backend_.forms_norm_ahead(weights_.layers.front().o_w4, n);
  auto forms_ahead = [&](const backend::QuantizedWeight& producer, const backend::QuantizedWeight& consumer) {
    return may_form_ahead && backend_.forms_norm_ahead(producer, n) && backend_.forms_norm_ahead(consumer, n);
  };
  Tensor ahead_formed = may_form_ahead ? activation(hidden) : Tensor();  // r ∘ g of the next norm
  Tensor norm_sums = may_form_ahead ? Tensor::empty({n, hidden / 16}, DType::kF32, allocator) : Tensor();
  auto form_ahead = [&](const Tensor& norm_weight) {
    backend::LinearFusion fusion;
    fusion.norm_ahead = {&norm_weight, &ahead_formed, &norm_sums};
    return fusion;
  };
  auto read_ahead = [&] {
    backend::LinearFusion fusion;
    fusion.input = backend::LinearFusion::Input::kRmsNormAhead;
    fusion.eps = eps;
    fusion.norm_ahead.sums = &norm_sums;
    return fusion;
  };
  bool qkv_reads_ahead = false;  // the layer before formed this layer's attention norm

  // Each norm is formed inside the linear layer that reads it, and each
  // layer's output is added to the residual stream by the linear layer that
  // makes it (backend.h, LinearFusion): where the backend fuses them, a
  // decode layer is its GEMVs, RoPE and attention.
  backend_.embedding(weights_.embed, batch.token_ids, residual);
  trace("embedding", -1, residual);
  for (int64_t layer = 0; layer < spec_.num_layers; ++layer) {
    const LayerWeights& w = weights_.layers[layer];
    backend::PagedKvLayer& kv = cache.layers[layer];
    const LayerWeights* next = layer + 1 < spec_.num_layers ? &weights_.layers[layer + 1] : nullptr;
    const bool ffn_norm_ahead = forms_ahead(w.o_w4, w.gate_up_w4);
    const bool next_norm_ahead = next != nullptr && forms_ahead(w.down_w4, next->qkv_w4);
    backend::LinearFusion qkv_fusion = qkv_reads_ahead ? read_ahead() : normed_by(w.attn_norm);
    // Attention reads little memory: the weights after it may move meanwhile.
    qkv_fusion.prefetch = {w.o_w4.defined() ? &w.o_w4.qweight : &w.o,
                           w.gate_up_w4.defined() ? &w.gate_up_w4.qweight : &w.gate_up};
    project(qkv_reads_ahead ? ahead_formed : residual, qkv_fusion, w.qkv, w.qkv_w4, w.qkv_bias, qkv, &pending);
    if (w.q_norm.defined()) {  // Qwen3: each q and k head normalised before RoPE
      backend_.head_rms_norm(qkv, shard_.num_heads, shard_.num_kv_heads, w.q_norm, w.k_norm, eps);
    }
    if (trace_) {  // the rotated q and k are traced: the separate ops
      backend_.rope_and_cache_write(qkv, shard_.num_heads, inv_freq, attention_scaling, layer_batch, kv,
                                    cache.block_size);
      trace("qkv_rope", layer, qkv);
      backend_.paged_attention(qkv, shard_.num_heads, layer_batch, kv, cache.block_size, attn_out);
    } else {
      backend_.rope_attention(qkv, shard_.num_heads, inv_freq, attention_scaling, layer_batch, kv, cache.block_size,
                              attn_out);
    }
    trace("attention", layer, attn_out);
    // residual += attention
    project_into_residual(attn_out, ffn_norm_ahead ? form_ahead(w.ffn_norm) : backend::LinearFusion{}, w.o, w.o_w4,
                          residual, partial, pending);
    if (shard_.world_size == 1) trace("attention_residual", layer, residual);
    const Tensor& ffn_input = ffn_norm_ahead ? ahead_formed : residual;
    backend::LinearFusion ffn_fusion = ffn_norm_ahead ? read_ahead() : normed_by(w.ffn_norm);
    backend::LinearFusion down_fusion = next_norm_ahead ? form_ahead(next->attn_norm) : backend::LinearFusion{};
    if (!trace_ && w.gate_up_w4.defined() && backend_.stores_silu_mul(w.gate_up_w4, n)) {
      // SiLU·mul in the gate_up product's store (4-bit): it writes the down
      // projection's input, [n, inter] in the first half of gate_up's memory.
      ffn_fusion.output = backend::LinearFusion::Output::kSiluMul;
      Tensor activated = gate_up.reshape({2 * n, shard_.intermediate_size}).slice_rows(0, n);
      project(ffn_input, ffn_fusion, w.gate_up, w.gate_up_w4, Tensor(), activated, &pending);
      project_into_residual(activated, down_fusion, w.down, w.down_w4, residual, partial, pending);  // residual += mlp
    } else {
      project(ffn_input, ffn_fusion, w.gate_up, w.gate_up_w4, Tensor(), gate_up, &pending);
      trace("gate_up", layer, gate_up);
      down_fusion.input = backend::LinearFusion::Input::kSiluMul;
      down_fusion.scratch = &formed;
      project_into_residual(gate_up, down_fusion, w.down, w.down_w4, residual, partial, pending);  // residual += mlp
    }
    qkv_reads_ahead = next_norm_ahead;
    if (shard_.world_size == 1) trace("residual", layer, residual);  // on several ranks the add is still pending
  }
  if (pending.defined()) backend_.add(residual, pending);

  const int64_t m = static_cast<int64_t>(batch.logit_rows.size());
  TESSERA_CHECK(logits.dtype() == DType::kF32 && logits.dim(0) == m && logits.dim(1) == shard_.vocab_rows);
  Tensor selected = Tensor::empty({m, hidden}, dtype, allocator);
  backend_.gather_rows(residual, batch.logit_rows, selected);
  // The final norm of only the rows that need logits; logits in f32 on every
  // backend, this rank's vocabulary rows.
  project(selected, normed_by(weights_.final_norm), weights_.lm_head, backend::QuantizedWeight(), Tensor(), logits);
}

namespace {
void log_loaded(const ModelSpec& spec, const std::filesystem::path& model_dir,
                std::chrono::steady_clock::time_point start) {
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log_info("loaded {} ({} layers, hidden {}, {} heads / {} kv heads, vocab {}) from {} in {:.2f} s", spec.architecture,
           spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.vocab_size, model_dir.string(),
           seconds);
}
}  // namespace

CanonicalWeights HostModel::part(int64_t part) const {
  TESSERA_CHECK(architecture != nullptr && checkpoint != nullptr);
  return assemble_part(spec, *architecture, *checkpoint, part);
}

HostModel read_host_model(const std::filesystem::path& model_dir, const SpecOverrides& overrides) {
  HostModel model;
  model.spec = read_model_spec(model_dir, overrides);
  model.architecture = &find_architecture(model.spec.architecture);
  apply_architecture(model.spec, *model.architecture);
  model.checkpoint = std::make_shared<const Checkpoint>(Checkpoint::open(model_dir));
  return model;
}

std::unique_ptr<Transformer> make_transformer(const HostModel& model, backend::Backend& backend,
                                              comm::Communicator* comm) {
  auto start = std::chrono::steady_clock::now();
  const int world = comm ? comm->world_size() : 1;
  const bool first_rank = comm == nullptr || comm->rank() == 0;
  backend.check_supported({model.spec.head_dim, model.spec.num_heads, model.spec.num_kv_heads});
  TpShard shard = make_tp_shard(model.spec, comm ? comm->rank() : 0, world);
  ModelWeights weights = upload_weights(
      model.spec, [&](int64_t part) { return model.part(part); }, shard, backend, first_rank);
  if (first_rank) log_loaded(model.spec, model.checkpoint->dir(), start);
  return std::make_unique<Transformer>(model.spec, shard, std::move(weights), backend, world > 1 ? comm : nullptr);
}

std::unique_ptr<Transformer> load_transformer(const std::filesystem::path& model_dir, backend::Backend& backend,
                                              const SpecOverrides& overrides) {
  auto start = std::chrono::steady_clock::now();
  ModelSpec spec = read_model_spec(model_dir, overrides);
  const Architecture& arch = find_architecture(spec.architecture);
  apply_architecture(spec, arch);
  backend.check_supported({spec.head_dim, spec.num_heads, spec.num_kv_heads});  // before reading any weight
  Checkpoint checkpoint = Checkpoint::open(model_dir);
  ModelWeights weights = load_weights(spec, arch, checkpoint, backend);
  log_loaded(spec, model_dir, start);
  return std::make_unique<Transformer>(std::move(spec), std::move(weights), backend);
}

}  // namespace tessera::model
