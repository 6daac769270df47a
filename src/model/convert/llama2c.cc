#include "model/convert/llama2c.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "model/convert/safetensors_writer.h"
#include "model/loader/mapped_file.h"

namespace tessera::model {

namespace {

// Reads consecutive f32 arrays from the checkpoint, refusing to run past its end.
class FloatCursor {
 public:
  FloatCursor(const MappedFile& file, size_t offset) : file_(file), offset_(offset) {}

  Tensor take(const std::string& what, Shape shape) {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * sizeof(float);
    if (offset_ + bytes > file_.size()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{} is truncated: '{}' needs bytes [{}, {}) but the file has {}", file_.path().string(),
                              what, offset_, offset_ + bytes, file_.size()),
                  "is this a llama2.c checkpoint (run.c format)?");
    }
    Tensor t = Tensor::empty(std::move(shape), DType::kF32);
    std::memcpy(t.raw_data(), file_.data() + offset_, bytes);
    offset_ += bytes;
    return t;
  }
  void skip(const std::string& what, size_t floats) { take(what, {static_cast<int64_t>(floats)}); }

 private:
  const MappedFile& file_;
  size_t offset_;
};

// llama2.c keeps RoPE pairs interleaved (2i, 2i+1) in each head's rows; HF's
// rotate_half pairs (i, i + head_dim/2). Reorder rows per head accordingly.
Tensor permute_for_rotate_half(const Tensor& w, int64_t heads) {
  const int64_t rows = w.dim(0), cols = w.dim(1), head_dim = rows / heads;
  Tensor out = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const float* source = w.data<float>() + (h * head_dim + 2 * i + j) * cols;
        float* target = out.data<float>() + (h * head_dim + j * head_dim / 2 + i) * cols;
        std::memcpy(target, source, cols * sizeof(float));
      }
    }
  }
  return out;
}

Llama2cHeader read_header(const MappedFile& file) {
  int32_t fields[7];
  if (file.size() < sizeof(fields)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} is too short for a llama2.c header", file.path().string()));
  }
  std::memcpy(fields, file.data(), sizeof(fields));
  Llama2cHeader h{fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], fields[6], fields[5] > 0};
  if (h.vocab_size < 0) h.vocab_size = -h.vocab_size;
  const bool sane = h.dim > 0 && h.hidden_dim > 0 && h.n_layers > 0 && h.n_heads > 0 && h.n_kv_heads > 0 &&
                    h.vocab_size > 0 && h.seq_len > 0 && h.dim % h.n_heads == 0 && h.n_heads % h.n_kv_heads == 0 &&
                    (h.dim / h.n_heads) % 2 == 0 && h.dim <= (1 << 16) && h.n_layers <= 1024 &&
                    h.vocab_size <= (1 << 22) && h.seq_len <= (1 << 22);
  if (!sane) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: impossible llama2.c header (dim {}, hidden {}, layers {}, heads {}, kv heads {}, "
                            "vocab {}, seq_len {})",
                            file.path().string(), h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads,
                            h.vocab_size, h.seq_len));
  }
  return h;
}

void write_json(const std::filesystem::path& path, const nlohmann::ordered_json& value) {
  std::ofstream out(path);
  out << value.dump(2) << "\n";
  if (!out) throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot write {}", path.string()));
}

}  // namespace

Llama2cHeader convert_llama2c_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out_dir) {
  std::shared_ptr<MappedFile> file = MappedFile::open(checkpoint);
  const Llama2cHeader h = read_header(*file);
  const int64_t L = h.n_layers, dim = h.dim, hidden = h.hidden_dim, head_dim = h.dim / h.n_heads;
  const int64_t kv_dim = h.n_kv_heads * head_dim;
  FloatCursor cursor(*file, 7 * sizeof(int32_t));

  // run.c's order: every array of one kind for all layers, then the next kind.
  Tensor embed = cursor.take("token_embedding_table", {h.vocab_size, dim});
  Tensor rms_att = cursor.take("rms_att_weight", {L, dim});
  Tensor wq = cursor.take("wq", {L, dim, dim});
  Tensor wk = cursor.take("wk", {L, kv_dim, dim});
  Tensor wv = cursor.take("wv", {L, kv_dim, dim});
  Tensor wo = cursor.take("wo", {L, dim, dim});
  Tensor rms_ffn = cursor.take("rms_ffn_weight", {L, dim});
  Tensor w1 = cursor.take("w1", {L, hidden, dim});
  Tensor w2 = cursor.take("w2", {L, dim, hidden});
  Tensor w3 = cursor.take("w3", {L, hidden, dim});
  Tensor rms_final = cursor.take("rms_final_weight", {dim});
  cursor.skip("freq_cis_real", static_cast<size_t>(h.seq_len) * head_dim / 2);
  cursor.skip("freq_cis_imag", static_cast<size_t>(h.seq_len) * head_dim / 2);
  Tensor classifier = h.shared_classifier ? Tensor() : cursor.take("wcls", {h.vocab_size, dim});

  auto layer_of = [](const Tensor& stacked, int64_t layer) {
    Tensor t = stacked.slice_rows(layer, layer + 1);
    Shape shape(stacked.shape().begin() + 1, stacked.shape().end());
    return t.reshape(shape);
  };
  std::vector<std::pair<std::string, Tensor>> tensors = {{"model.embed_tokens.weight", embed}};
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    tensors.push_back({p + "input_layernorm.weight", layer_of(rms_att, l)});
    tensors.push_back({p + "self_attn.q_proj.weight", permute_for_rotate_half(layer_of(wq, l), h.n_heads)});
    tensors.push_back({p + "self_attn.k_proj.weight", permute_for_rotate_half(layer_of(wk, l), h.n_kv_heads)});
    tensors.push_back({p + "self_attn.v_proj.weight", layer_of(wv, l)});
    tensors.push_back({p + "self_attn.o_proj.weight", layer_of(wo, l)});
    tensors.push_back({p + "post_attention_layernorm.weight", layer_of(rms_ffn, l)});
    tensors.push_back({p + "mlp.gate_proj.weight", layer_of(w1, l)});
    tensors.push_back({p + "mlp.down_proj.weight", layer_of(w2, l)});
    tensors.push_back({p + "mlp.up_proj.weight", layer_of(w3, l)});
  }
  tensors.push_back({"model.norm.weight", rms_final});
  if (classifier.defined()) tensors.push_back({"lm_head.weight", classifier});

  std::filesystem::create_directories(out_dir);
  write_safetensors(out_dir / "model.safetensors", tensors);
  nlohmann::ordered_json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", dim},
      {"intermediate_size", hidden},
      {"num_hidden_layers", L},
      {"num_attention_heads", h.n_heads},
      {"num_key_value_heads", h.n_kv_heads},
      {"vocab_size", h.vocab_size},
      {"max_position_embeddings", h.seq_len},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"rope_scaling", nullptr},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", h.shared_classifier},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"torch_dtype", "float32"},
  };
  write_json(out_dir / "config.json", config);
  write_json(out_dir / "generation_config.json", {{"bos_token_id", 1}, {"eos_token_id", 2}});
  log_info("converted {} ({} layers, dim {}, vocab {}) into {}", checkpoint.string(), L, dim, h.vocab_size,
           out_dir.string());
  return h;
}

}  // namespace tessera::model
