#include "model/random_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace tessera::model {

ModelSpec random_model_spec(const std::string& name) {
  ModelSpec spec;
  spec.architecture = "LlamaForCausalLM";
  spec.model_type = "llama";
  spec.rms_norm_eps = 1e-5;
  spec.max_position_embeddings = 32768;
  spec.rope_theta = 1e6;
  auto shape = [&](int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t inter, int64_t vocab) {
    spec.hidden_size = hidden;
    spec.num_layers = layers;
    spec.num_heads = heads;
    spec.num_kv_heads = kv_heads;
    spec.head_dim = hidden / heads;
    spec.intermediate_size = inter;
    spec.vocab_size = vocab;
  };
  if (name == "100m") shape(768, 12, 12, 12, 2048, 8192);
  else if (name == "internlm2_5-7b") shape(4096, 32, 32, 8, 14336, 92544);
  else if (name == "internlm2_5-20b") shape(6144, 48, 48, 8, 16384, 92544);
  else {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("unknown random model shape '{}'", name),
                "use 100m, internlm2_5-7b or internlm2_5-20b");
  }
  return spec;
}

namespace {

// Random tensors are made in chunks of 2^20 values, chunk c drawing from a
// generator of its own seeded by (seed, c), on every core: the same values
// whatever the thread count, and a 7B shape's billion values (one layer's,
// which every layer copies, the embedding and the LM head) in seconds where
// one generator took about 15 on each `bench` run, which makes them anew.
constexpr int64_t kChunk = int64_t(1) << 20;

std::mt19937_64 chunk_generator(uint64_t seed, int64_t chunk) {
  return std::mt19937_64(seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(chunk + 1)));
}

int64_t chunk_count(int64_t n) { return (n + kChunk - 1) / kChunk; }

// Uniform values with the standard deviation of a fan-in-scaled init, made
// on the host in the backend's compute dtype.
Tensor random_host(Shape shape, double stddev, double offset, uint64_t seed, DType dtype) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  const float bound = static_cast<float>(stddev * std::sqrt(3.0));
  const int64_t n = t.numel();
  auto* out = static_cast<char*>(t.raw_data());
  const int64_t chunks = chunk_count(n);
#pragma omp parallel for schedule(dynamic)
  for (int64_t c = 0; c < chunks; ++c) {
    std::mt19937_64 rng = chunk_generator(seed, c);
    std::uniform_real_distribution<float> dist(-bound, bound);
    const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = static_cast<float>(offset) + dist(rng);
    convert_from_f32(values.data(), dtype, out + dtype_bytes(dtype, static_cast<size_t>(begin)),
                     static_cast<size_t>(count));
  }
  return t;
}

}  // namespace

backend::QuantizedWeight random_quantized_weight(int64_t out, int64_t in, int64_t group, double stddev,
                                                 uint64_t seed) {
  backend::QuantizedWeight w;
  w.out_features = out;
  w.in_features = in;
  w.group_size = group;
  w.qweight = Tensor::empty({out, in / 8}, DType::kI32);
  w.scales = Tensor::empty({out, in / group}, DType::kF16);
  w.zeros = Tensor::empty({out, in / group}, DType::kU8);
  auto* q = w.qweight.data<int32_t>();
  const int64_t words = w.qweight.numel(), chunks = chunk_count(words);
#pragma omp parallel for schedule(dynamic)
  for (int64_t c = 0; c < chunks; ++c) {
    std::mt19937_64 rng = chunk_generator(seed, c);
    for (int64_t i = c * kChunk; i < std::min(words, (c + 1) * kChunk); ++i) {
      q[i] = static_cast<int32_t>(static_cast<uint32_t>(rng()));
    }
  }
  std::mt19937_64 rng = chunk_generator(~seed, 0);  // the scales are few: one generator
  std::uniform_real_distribution<float> spread(0.75f, 1.25f);
  auto* scales = static_cast<uint16_t*>(w.scales.raw_data());
  auto* zeros = w.zeros.data<uint8_t>();
  for (int64_t i = 0; i < w.scales.numel(); ++i) {
    scales[i] = f32_to_f16(static_cast<float>(stddev / 4.6) * spread(rng));  // q - z has a stddev of about 4.6
    zeros[i] = static_cast<uint8_t>(7 + rng() % 3);
  }
  return w;
}

std::unique_ptr<Transformer> make_random_transformer(const ModelSpec& spec_in, backend::Backend& backend,
                                                     uint64_t seed, int64_t awq_group_size) {
  ModelSpec spec = spec_in;
  if (awq_group_size > 0) spec.quantization = QuantizationConfig::awq_gemm(awq_group_size);
  backend.check_supported({spec.head_dim, spec.num_heads, spec.num_kv_heads});
  std::mt19937_64 rng(seed);
  const DType dtype = backend.compute_dtype();
  const int64_t h = spec.hidden_size;
  const double scale = 1.0 / std::sqrt(static_cast<double>(h));
  Tensor norm = random_host({h}, 0.05, 1.0, rng(), dtype);
  const double down_scale = 1.0 / std::sqrt(double(spec.intermediate_size));
  const bool awq = awq_group_size > 0;
  Tensor qkv, o, gate_up, down;
  backend::QuantizedWeight qkv_w4, o_w4, gate_up_w4, down_w4;
  if (awq) {
    qkv_w4 = random_quantized_weight(spec.qkv_size(), h, awq_group_size, scale, rng());
    o_w4 = random_quantized_weight(h, spec.q_size(), awq_group_size, scale, rng());
    gate_up_w4 = random_quantized_weight(2 * spec.intermediate_size, h, awq_group_size, scale, rng());
    gate_up_w4.gate_up_halves = true;
    down_w4 = random_quantized_weight(h, spec.intermediate_size, awq_group_size, down_scale, rng());
    if (!backend.supports_quantized_linear()) {
      qkv = backend::dequantize_weight(qkv_w4).to_dtype(dtype);
      o = backend::dequantize_weight(o_w4).to_dtype(dtype);
      gate_up = backend::dequantize_weight(gate_up_w4).to_dtype(dtype);
      down = backend::dequantize_weight(down_w4).to_dtype(dtype);
    }
  } else {
    qkv = random_host({spec.qkv_size(), h}, scale, 0.0, rng(), dtype);
    o = random_host({h, spec.q_size()}, scale, 0.0, rng(), dtype);
    gate_up = random_host({2 * spec.intermediate_size, h}, scale, 0.0, rng(), dtype);
    down = random_host({h, spec.intermediate_size}, down_scale, 0.0, rng(), dtype);
  }
  const bool packed = awq && backend.supports_quantized_linear();
  // Each use gets its own memory, even where upload_weight would share the host tensor (CPU).
  auto own = [&](const Tensor& host) {
    Tensor uploaded = backend.upload_weight(host);
    if (uploaded.buffer() != host.buffer()) return uploaded;
    Tensor copy = Tensor::empty(host.shape(), dtype, backend.allocator());
    backend.copy(uploaded, copy);
    return copy;
  };
  ModelWeights weights;
  weights.embed = backend.upload_weight(random_host({spec.vocab_size, h}, 1.0, 0.0, rng(), dtype));
  weights.lm_head = backend.upload_weight(random_host({spec.vocab_size, h}, scale, 0.0, rng(), dtype));
  weights.final_norm = own(norm);
  for (int64_t layer = 0; layer < spec.num_layers; ++layer) {
    LayerWeights lw;
    lw.attn_norm = own(norm);
    lw.ffn_norm = own(norm);
    if (packed) {  // each upload is a device copy of its own
      lw.qkv_w4 = backend.upload_quantized_weight(qkv_w4);
      lw.o_w4 = backend.upload_quantized_weight(o_w4);
      lw.gate_up_w4 = backend.upload_quantized_weight(gate_up_w4);
      lw.down_w4 = backend.upload_quantized_weight(down_w4);
    } else {
      lw.qkv = own(qkv);
      lw.o = own(o);
      lw.gate_up = own(gate_up);
      lw.down = own(down);
    }
    weights.layers.push_back(std::move(lw));
  }
  backend.synchronize();
  return std::make_unique<Transformer>(spec, std::move(weights), backend);
}

}  // namespace tessera::model
