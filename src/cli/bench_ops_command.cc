// `tessera bench ops`: where the time of one decode step goes. Every op of a
// decode step runs alone at the model's real shapes and the batch size asked
// for, timed by the device's clock over many repeats (Backend::time_per_call:
// CUDA events on a GPU), next to the bytes it must move and the copy bandwidth
// measured in the same run. Then the whole forward (wall clock, host included),
// so the gap between the sum of the ops and the step is the host's share:
// launches, metadata uploads, the logits copy. The engine's host work per step
// (the sampler on each logits row) closes the table.
//
// Weights of one layer fit in the H200's 50 MB L2 for the smaller linears, but
// a real step streams 32 different layers; each linear therefore rotates over
// enough copies of its weight to exceed the L2, so the time is DRAM's.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "cli/bench_limits.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "model/random_weights.h"
#include "model/transformer.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOpsArgs {
  std::string random_shape = "internlm2_5-7b";
  std::string device = "cuda";
  std::string dtype = "auto";
  int64_t batch = 1;
  int64_t repeats = 50;
  std::vector<int64_t> contexts = {128, 4096};
  int64_t block_size = 64;
  int64_t forward_context = 128;
  bool skip_forward = false;
  int64_t awq_group_size = 0;  // > 0: the transformer layers' linears are 4-bit (AWQ) in groups of this size
  int quant_policy = 0;        // 8 or 4: the KV cache in 8- or 4-bit codes (decode attention and the forward)
};

struct Row {
  std::string op, shape;
  double seconds = 0;   // per call
  double bytes = 0;     // moved per call (the floor)
  int64_t per_step = 0; // calls in one decode step
};

class OpTable {
 public:
  explicit OpTable(double bandwidth) : bandwidth_(bandwidth) {}
  void add(Row row) { rows_.push_back(std::move(row)); }

  void print() const {
    fmt::print("{:<22} {:<28} {:>10} {:>9} {:>7} {:>7} {:>11} {:>11}\n", "op", "shape", "us/call", "GB/s", "%copy",
               "x/step", "us/step", "limit us");
    double total = 0, limit = 0;
    for (const Row& r : rows_) {
      const double gbs = r.bytes / r.seconds / 1e9;
      const double step_us = r.seconds * 1e6 * r.per_step, limit_us = r.bytes / bandwidth_ * 1e6 * r.per_step;
      total += step_us;
      limit += limit_us;
      fmt::print("{:<22} {:<28} {:>10.2f} {:>9.0f} {:>6.1f}% {:>7} {:>11.1f} {:>11.1f}\n", r.op, r.shape,
                 r.seconds * 1e6, gbs, 100.0 * r.bytes / r.seconds / bandwidth_, r.per_step, step_us, limit_us);
    }
    fmt::print("{:<22} {:<28} {:>10} {:>9} {:>7} {:>7} {:>11.1f} {:>11.1f}\n", "sum of ops", "(per decode step)", "",
               "", "", "", total, limit);
  }
  double total_seconds() const {
    double total = 0;
    for (const Row& r : rows_) total += r.seconds * r.per_step;
    return total;
  }

 private:
  double bandwidth_;
  std::vector<Row> rows_;
};

Tensor device_tensor(Shape shape, DType dtype, backend::Backend& backend, uint32_t seed) {
  // Small random values made on the host once; copies on the device share them.
  Tensor host = Tensor::empty(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  float* p = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i) p[i] = dist(rng);
  return backend.upload_weight(host.dtype() == dtype ? host : host.to_dtype(dtype));
}

// y [batch, out] (=|+=) input(x) · w [out, in]ᵀ as a decode step calls it
// (Backend::fused_linear: the norm or SiLU·mul before it, the residual add
// after it), over enough weight copies to stream from DRAM. With
// `awq_group` > 0 the weight is a random 4-bit one in groups of that size,
// uploaded as an AWQ checkpoint's would be.
Row time_linear(backend::Backend& backend, const std::string& name, int64_t batch, int64_t out, int64_t in,
                DType out_dtype, backend::LinearFusion fusion, int64_t per_step, int repeats, int64_t awq_group = 0) {
  const DType dtype = backend.compute_dtype();
  std::vector<Tensor> weights;
  std::vector<backend::QuantizedWeight> packed;
  double weight_bytes = 0;
  auto copies_for = [](double bytes) { return static_cast<int>(std::clamp<double>(std::ceil(256e6 / bytes), 1, 16)); };
  if (awq_group > 0) {
    const backend::QuantizedWeight host = model::random_quantized_weight(out, in, awq_group, 0.02, 1);
    weight_bytes = static_cast<double>(host.nbytes());
    for (int c = copies_for(weight_bytes); c > 0; --c) packed.push_back(backend.upload_quantized_weight(host));
  } else {
    weight_bytes = static_cast<double>(dtype_bytes(dtype, out * in));
    const int copies = copies_for(weight_bytes);
    weights.push_back(device_tensor({out, in}, dtype, backend, 1));
    for (int c = 1; c < copies; ++c) {
      Tensor copy = Tensor::empty({out, in}, dtype, backend.allocator());
      backend.copy(weights.front(), copy);
      weights.push_back(copy);
    }
  }
  const size_t copies = awq_group > 0 ? packed.size() : weights.size();
  const bool silu = fusion.input == backend::LinearFusion::Input::kSiluMul;
  Tensor x = device_tensor({batch, silu ? 2 * in : in}, dtype, backend, 2);
  Tensor norm_weight = device_tensor({in}, dtype, backend, 3);
  fusion.norm_weight = &norm_weight;
  fusion.eps = 1e-5f;
  // A residual to add into (the compute dtype), or the output alone.
  Tensor y = fusion.accumulate ? device_tensor({batch, out}, dtype, backend, 4)
                               : Tensor::empty({batch, out}, out_dtype, backend.allocator());
  auto call = [&](size_t copy) {
    if (awq_group > 0) {
      backend.fused_linear(x, fusion, Tensor(), packed[copy], Tensor(), y);
    } else {
      backend.fused_linear(x, fusion, weights[copy], backend::QuantizedWeight(), Tensor(), y);
    }
  };
  call(0);  // plans and the kernel choice
  size_t next = 0;
  const double seconds = backend.time_per_call(
      [&] {
        call(next);
        next = (next + 1) % copies;
      },
      repeats);
  const double bytes = weight_bytes + static_cast<double>(dtype_bytes(dtype, x.numel())) +
                       static_cast<double>(dtype_bytes(out_dtype, batch * out)) * (fusion.accumulate ? 2 : 1);
  return {name, fmt::format("{}x{} . {}x{}{}", batch, in, out, in, awq_group > 0 ? " w4" : ""), seconds, bytes,
          per_step};
}

// A decode-only batch: `batch` sequences of `context` tokens, the last one new, shuffled blocks.
backend::AttentionBatch decode_batch(int64_t batch, int64_t context, int64_t block_size) {
  backend::AttentionBatch b;
  const int32_t blocks = static_cast<int32_t>((context + block_size - 1) / block_size);
  b.max_blocks_per_seq = blocks;
  b.block_tables.resize(batch * blocks);
  std::iota(b.block_tables.begin(), b.block_tables.end(), 0);
  std::shuffle(b.block_tables.begin(), b.block_tables.end(), std::mt19937(7));
  b.query_start = {0};
  for (int64_t s = 0; s < batch; ++s) {
    b.positions.push_back(static_cast<int32_t>(context - 1));
    b.query_start.push_back(static_cast<int32_t>(s + 1));
  }
  return b;
}

void time_attention(backend::Backend& backend, OpTable& table, const model::ModelSpec& spec, const BenchOpsArgs& args,
                    int repeats) {
  const DType dtype = backend.compute_dtype();
  const int64_t n = args.batch, hd = spec.head_dim;
  for (int64_t context : args.contexts) {
    backend::AttentionBatch batch = decode_batch(n, context, args.block_size);
    const int64_t blocks = static_cast<int64_t>(batch.block_tables.size());
    const Shape cache_shape = {blocks, spec.num_kv_heads, args.block_size, hd};
    const int bits = args.quant_policy;  // 0, 8 or 4
    const DType cache_dtype = bits == 8 ? DType::kU8 : bits == 4 ? DType::kU4 : dtype;
    const Shape params_shape = {blocks, spec.num_kv_heads, args.block_size, 2};
    backend::PagedKvLayer cache{Tensor::empty(cache_shape, cache_dtype, backend.allocator()),
                                Tensor::empty(cache_shape, cache_dtype, backend.allocator())};
    if (bits != 0) {
      cache.key_params = Tensor::empty(params_shape, DType::kF32, backend.allocator());
      cache.value_params = Tensor::empty(params_shape, DType::kF32, backend.allocator());
    }
    // Bytes of one token's keys and values in one layer's cache.
    const double kv_token_bytes =
        bits != 0 ? static_cast<double>(2 * spec.num_kv_heads * (dtype_bytes(cache_dtype, hd) + 2 * sizeof(float)))
                  : static_cast<double>(dtype_bytes(dtype, 2 * spec.kv_size()));
    Tensor qkv = device_tensor({n, spec.qkv_size()}, dtype, backend, 3);
    Tensor out = Tensor::empty({n, spec.q_size()}, dtype, backend.allocator());
    std::vector<float> inv_freq(n * hd / 2);
    for (int64_t i = 0; i < n * hd / 2; ++i) inv_freq[i] = std::pow(1e6f, -2.0f * static_cast<float>(i % (hd / 2)) / hd);
    backend.prepare(batch);
    const std::string shape = fmt::format("{} seqs x {} ctx", n, context);
    if (context == args.contexts.front()) {
      const double s = backend.time_per_call(
          [&] { backend.rope_and_cache_write(qkv, spec.num_heads, inv_freq, 1.0f, batch, cache, args.block_size); },
          repeats);
      const double bytes = static_cast<double>(dtype_bytes(dtype, n * 2 * spec.qkv_size())) + n * kv_token_bytes;
      table.add({"rope+cache write", fmt::format("{} tokens", n), s, bytes, spec.num_layers});
    } else {
      backend.rope_and_cache_write(qkv, spec.num_heads, inv_freq, 1.0f, batch, cache, args.block_size);
    }
    const double s = backend.time_per_call(
        [&] { backend.paged_attention(qkv, spec.num_heads, batch, cache, args.block_size, out); }, repeats);
    const double bytes = n * context * kv_token_bytes + static_cast<double>(dtype_bytes(dtype, n * spec.q_size() * 2));
    table.add({fmt::format("decode attention {}{}", context, bits != 0 ? fmt::format(" int{}", bits) : ""), shape, s,
               bytes,
               context == args.contexts.front() ? spec.num_layers : 0});
  }
}

// Wall-clock seconds of one decode step through Transformer::forward (logits on the host).
double time_forward(backend::Backend& backend, const model::ModelSpec& spec, const BenchOpsArgs& args) {
  auto model = model::make_random_transformer(spec, backend, 1, args.awq_group_size);
  model->set_kv_cache_format(backend::kv_cache_format_for_policy(args.quant_policy));
  const int64_t context = args.forward_context;
  model::ForwardBatch batch;
  batch.attention = decode_batch(args.batch, context, args.block_size);
  batch.token_ids.assign(args.batch, 5);
  batch.logit_rows.resize(args.batch);
  std::iota(batch.logit_rows.begin(), batch.logit_rows.end(), 0);
  backend::PagedKvCache cache =
      model->allocate_cache(static_cast<int64_t>(batch.attention.block_tables.size()), args.block_size);
  for (int i = 0; i < 3; ++i) model->forward(batch, cache);  // warm-up: plans, kernel choices
  const int steps = static_cast<int>(std::max<int64_t>(5, args.repeats / 2));
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) model->forward(batch, cache);
  return std::chrono::duration<double>(Clock::now() - start).count() / steps;
}

// The sampling cases both samplers are timed on, each on a row of N(0, σ)
// logits: σ 3 is peaked enough for the truncations to keep few tokens; σ 1
// is flat, so top_p keeps tens of thousands (the whole-row path).
struct SamplerCase {
  const char* name;
  engine::SamplingParams params;
  float logit_sigma = 3.0f;
};

std::vector<SamplerCase> sampler_cases() {
  engine::SamplingParams greedy, server, topp, nucleus, penalties, flat;
  server.temperature = 0.7f;  // what a request gets from the server without sampling fields (LMDeploy's defaults)
  server.top_k = 40;
  topp.temperature = 0.8f;
  topp.top_p = 0.95f;
  topp.top_k = 50;
  nucleus.temperature = 0.8f;
  nucleus.top_p = 0.8f;
  penalties = topp;
  penalties.repetition_penalty = 1.1f;
  flat.temperature = 1.0f;
  flat.top_p = 0.95f;
  return {{"greedy", greedy},
          {"T 0.7 top_k 40 (server default)", server},
          {"T 0.8 top_k 50 top_p 0.95", topp},
          {"T 0.8 top_p 0.8 (no top_k)", nucleus},
          {"+ repetition penalty", penalties},
          {"T 1.0 top_p 0.95, flat row", flat, 1.0f}};
}

std::vector<float> sampler_logits(int64_t vocab, float sigma) {
  std::vector<float> logits(vocab);
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, sigma);
  for (float& v : logits) v = dist(rng);
  return logits;
}

// Host seconds per logits row of engine::Sampler, greedy and with truncation.
void time_sampler(int64_t vocab, int64_t batch) {
  for (const SamplerCase& c : sampler_cases()) {
    const std::vector<float> logits = sampler_logits(vocab, c.logit_sigma);
    engine::Sampler sampler(c.params);
    std::vector<int32_t> history(256, 17);
    engine::SampleInputs inputs;
    inputs.prompt = history;
    const int rows = 20;
    const auto start = Clock::now();
    for (int i = 0; i < rows; ++i) sampler.sample(logits, inputs);
    const double s = std::chrono::duration<double>(Clock::now() - start).count() / rows;
    fmt::print("host sampler    {:<31} {:>8.1f} us/row, {:>8.2f} ms/step at batch {}\n", c.name, s * 1e6,
               s * 1e3 * batch, batch);
  }
}

// Backend::sample_rows over a step's rows (edits, kernel and the ids' copy),
// the same logits in every row.
void time_device_sampler(backend::Backend& backend, int64_t vocab, int64_t batch, int repeats) {
  for (const SamplerCase& c : sampler_cases()) {
    const std::vector<float> row = sampler_logits(vocab, c.logit_sigma);
    std::vector<float> values;
    for (int64_t i = 0; i < batch; ++i) values.insert(values.end(), row.begin(), row.end());
    Tensor logits = backend.upload_weight(Tensor::from_f32(values, {batch, vocab}));
    engine::Sampler sampler(c.params);
    std::vector<int32_t> history(256, 17);
    engine::SampleInputs inputs;
    inputs.prompt = history;
    backend::SamplingBatch sampling;
    for (int64_t i = 0; i < batch; ++i) {
      const auto r = static_cast<int32_t>(i);
      for (const backend::LogitEdit& e : engine::logit_edits(c.params, inputs, vocab, r)) sampling.edits.push_back(e);
      sampling.rows.push_back({c.params.temperature, c.params.top_k, c.params.top_p, c.params.min_p,
                               c.params.temperature > 0.0f ? sampler.next_uniform() : 0.0});
    }
    const double s = backend.time_per_call([&] { backend.sample_rows(logits, sampling); }, repeats);
    fmt::print("device sampler  {:<31} {:>8.1f} us/row, {:>8.3f} ms/step at batch {}\n", c.name, s * 1e6 / batch,
               s * 1e3, batch);
  }
}

int run_bench_ops(const BenchOpsArgs& args) {
  const Device device = parse_device(args.device);
  const DType dtype = backend::choose_compute_dtype(args.dtype, device);
  std::unique_ptr<backend::Backend> backend =
      device.is_cpu() ? backend::make_cpu_backend() : backend::make_cuda_backend(device.index, dtype);
  const model::ModelSpec spec = model::random_model_spec(args.random_shape);
  if (args.awq_group_size > 0 && !backend->supports_quantized_linear()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("bench ops: --awq-group-size needs a backend with 4-bit kernels; {} dequantizes 4-bit "
                            "weights at load (drop the flag, or use --device cuda)", device.to_string()));
  }
  const int repeats = static_cast<int>(args.repeats);

  // The limit of this run: read + write bytes per second of a large device copy.
  const double bandwidth = measure_copy_bandwidth(*backend);
  const int64_t n = args.batch, h = spec.hidden_size, inter = spec.intermediate_size;
  fmt::print("ops of one decode step: random {} ({} layers), {}{} on {}, batch {}\n", args.random_shape,
             spec.num_layers, dtype_name(dtype),
             args.awq_group_size > 0 ? fmt::format(", AWQ 4-bit groups of {}", args.awq_group_size) : "",
             device.to_string(), n);
  fmt::print("copy bandwidth  {:.1f} GB/s (read + write, measured now); %copy is each op's bytes / time against it\n\n",
             bandwidth / 1e9);

  OpTable table(bandwidth);
  const int64_t layers = spec.num_layers;
  using Input = backend::LinearFusion::Input;
  const backend::LinearFusion normed{Input::kRmsNorm}, added{Input::kAsIs, nullptr, 0.0f, true};
  const backend::LinearFusion gated_added{Input::kSiluMul, nullptr, 0.0f, true};
  const int64_t g = args.awq_group_size;
  table.add(time_linear(*backend, "qkv (rms_norm in)", n, spec.qkv_size(), h, dtype, normed, layers, repeats, g));
  table.add(time_linear(*backend, "o (+= residual)", n, h, spec.q_size(), dtype, added, layers, repeats, g));
  table.add(time_linear(*backend, "gate_up (rms_norm in)", n, 2 * inter, h, dtype, normed, layers, repeats, g));
  table.add(time_linear(*backend, "down (silu_mul in, +=)", n, h, inter, dtype, gated_added, layers, repeats, g));
  table.add(time_linear(*backend, "lm_head (rms_norm in, f32 out)", n, spec.vocab_size, h, DType::kF32, normed, 1,
                        repeats));
  {
    Tensor x = device_tensor({n, h}, dtype, *backend, 4), w = device_tensor({h}, dtype, *backend, 5);
    Tensor out = Tensor::empty({n, h}, dtype, backend->allocator());
    const double e = static_cast<double>(dtype_bytes(dtype, 1));
    // The norms and SiLU·mul run inside the linear rows above where the
    // backend fuses them; what each would cost as its own op, not counted
    // in the step (0 per step):
    double s = backend->time_per_call([&] { backend->rms_norm(x, w, 1e-5f, out); }, repeats);
    table.add({"rms_norm (alone)", fmt::format("{}x{}", n, h), s, e * (2 * n * h + h), 0});
    Tensor gate_up = device_tensor({n, 2 * inter}, dtype, *backend, 7);
    Tensor act = Tensor::empty({n, inter}, dtype, backend->allocator());
    s = backend->time_per_call([&] { backend->silu_mul(gate_up, act); }, repeats);
    table.add({"silu_mul (alone)", fmt::format("{}x{}", n, inter), s, e * 3 * n * inter, 0});
    Tensor table_w = device_tensor({1024, h}, dtype, *backend, 8);
    std::vector<int32_t> ids(n, 3);
    s = backend->time_per_call([&] { backend->embedding(table_w, ids, out); }, repeats);
    table.add({"embedding", fmt::format("{} ids", n), s, e * 2 * n * h, 1});
    std::vector<int32_t> rows(n);
    std::iota(rows.begin(), rows.end(), 0);
    Tensor gathered = Tensor::empty({n, h}, dtype, backend->allocator());
    s = backend->time_per_call([&] { backend->gather_rows(out, rows, gathered); }, repeats);
    table.add({"gather_rows", fmt::format("{} rows", n), s, e * 2 * n * h, 1});
    Tensor logits = Tensor::empty({n, spec.vocab_size}, DType::kF32, backend->allocator());
    s = backend->time_per_call([&] { backend->to_host_f32(logits); }, std::max(1, repeats / 5));
    table.add({"logits to host", fmt::format("{}x{} f32", n, spec.vocab_size), s, 4.0 * n * spec.vocab_size, 1});
  }
  time_attention(*backend, table, spec, args, repeats);
  table.print();

  fmt::print("\n");
  if (!args.skip_forward) {
    const double forward = time_forward(*backend, spec, args);
    const double ops = table.total_seconds();
    fmt::print("whole forward   {:.3f} ms/step at context {} (wall clock, logits on the host): {:.0f} tokens/s\n",
               forward * 1e3, args.forward_context, n / forward);
    fmt::print("sum of ops      {:.3f} ms; the rest, {:.3f} ms ({:.0f}%), is host work and launch gaps\n", ops * 1e3,
               (forward - ops) * 1e3, 100.0 * (forward - ops) / forward);
  }
  time_sampler(spec.vocab_size, n);
  if (backend->samples_rows()) {
    // Logits are f32 whatever the compute dtype; a backend of f32 uploads them as they are.
    auto f32 = backend::make_cuda_backend(device.index, DType::kF32);
    time_device_sampler(*f32, spec.vocab_size, n, std::max(1, repeats / 5));
  }
  return 0;
}

}  // namespace

void add_bench_ops_command(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<BenchOpsArgs>();
  CLI::App* bench = app.get_subcommand("bench");
  CLI::App* cmd = bench->add_subcommand("ops", "Time of each op of a decode step at a model's shapes, against the copy bandwidth");
  cmd->add_option("--random", args->random_shape, "model shape: 100m, internlm2_5-7b, internlm2_5-20b")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto, float16, bfloat16 or float32")->capture_default_str();
  cmd->add_option("--batch", args->batch, "sequences decoding together")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--repeats", args->repeats, "calls timed per op")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--contexts", args->contexts, "context lengths for decode attention, e.g. 128,4096")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--forward-context", args->forward_context, "context of the whole-forward timing")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--quant-policy", args->quant_policy,
                  "the KV cache: 0 (the compute dtype), 8 or 4 (8- or 4-bit codes)")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 4, 8}));
  cmd->add_option("--awq-group-size", args->awq_group_size,
                  "4-bit (AWQ) linear layers in groups of this many inputs; 0: 16-bit")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 32, 64, 128}));
  cmd->add_flag("--skip-forward", args->skip_forward, "no whole-forward timing (it loads the random model)");
  cmd->callback([&runner, args] { runner = [args] { return run_bench_ops(*args); }; });
}

}  // namespace tessera::cli
