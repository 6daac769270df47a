// Transformer: the decoder-only forward shared by every supported
// architecture (pre-norm attention and SwiGLU MLP blocks, RoPE, GQA).
//
// One forward takes a flat batch of new tokens from any number of sequences,
// each at its own positions; it writes their keys and values into the paged
// cache and attends over everything cached before. So a prefill, a chunk of a
// prefill, or one decode token per sequence are the same call.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/paged_kv.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace tessera::model {

struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [num_tokens] new tokens, sequence after sequence
  backend::AttentionBatch attention;     // positions, query_start, block tables of the same tokens
  std::vector<int32_t> logit_rows;       // token indices whose logits are wanted (usually each sequence's last)
};

// Called with every named intermediate when set (tests compare layer by layer).
using TraceFn = std::function<void(const std::string& name, int64_t layer, const Tensor& value)>;

class Transformer {
 public:
  Transformer(ModelSpec spec, ModelWeights weights, backend::Backend& backend);

  const ModelSpec& spec() const { return spec_; }
  backend::Backend& backend() { return backend_; }

  // A zeroed paged cache of `num_blocks` blocks of `block_size` tokens, every layer.
  backend::PagedKvCache allocate_cache(int64_t num_blocks, int64_t block_size);

  // Returns host f32 logits [logit_rows.size(), vocab].
  Tensor forward(const ForwardBatch& batch, backend::PagedKvCache& cache);

  void set_trace(TraceFn trace) { trace_ = std::move(trace); }

 private:
  void trace(const char* name, int64_t layer, const Tensor& value) const {
    if (trace_) trace_(name, layer, value);
  }

  ModelSpec spec_;
  ModelWeights weights_;
  backend::Backend& backend_;
  TraceFn trace_;
};

// Reads config.json, picks the architecture, loads and checks the weights.
std::unique_ptr<Transformer> load_transformer(const std::filesystem::path& model_dir, backend::Backend& backend);

}  // namespace tessera::model
