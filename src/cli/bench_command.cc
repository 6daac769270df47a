// `tessera bench decode`: single-stream prefill and decode speed on any
// backend, each reported against the physical limit measured in the same run:
// a decode step must read every weight once (bytes ÷ measured copy bandwidth),
// a prefill is arithmetic (FLOPs ÷ measured matmul rate).
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <vector>

#include "backend/backend.h"
#include "cli/bench_decode_table.h"
#include "cli/bench_limits.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/generate.h"
#include "model/random_weights.h"
#include "model/transformer.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct BenchArgs {
  std::string model_dir;
  std::string random_shape;
  std::string device = "cpu";
  std::string dtype = "auto";
  int64_t prompt_tokens = 16;
  int64_t decode_tokens = 64;
  int64_t prefill_tokens = 0;
  std::vector<std::string> quant;  // given with --quant or --batch: the table of bench_decode_table.h
  std::vector<int64_t> batch;
};

int64_t parameter_count(const model::ModelSpec& s) {
  // The LM head's rows count; the embedding rows read per token are negligible.
  return s.num_layers * s.linear_params_per_layer() + s.vocab_size * s.hidden_size;
}

void bench_prefill(model::Transformer& model, int64_t tokens, double matmul_rate) {
  const model::ModelSpec& spec = model.spec();
  std::vector<int32_t> prompt(tokens);
  for (int64_t i = 0; i < tokens; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 3) % spec.vocab_size);
  engine::GenerateOptions options;
  options.max_new_tokens = 1;
  engine::generate(model, prompt, options);  // warm-up: allocations, cuBLASLt plans
  auto start = Clock::now();
  engine::generate(model, prompt, options);
  const double seconds = seconds_since(start);
  // The LM head runs on the last token only (logit_rows); every other linear layer on all of them.
  const double lm_head = double(spec.vocab_size) * double(spec.hidden_size);
  const double flops = 2.0 * (parameter_count(spec) - lm_head) * tokens + 2.0 * lm_head;
  fmt::print("prefill         {} tokens in {:.1f} ms ({:.0f} tokens/s, {:.1f} TFLOP/s in linear layers)\n", tokens,
             seconds * 1e3, tokens / seconds, flops / seconds / 1e12);
  fmt::print("matmul rate     {:.1f} TFLOP/s (measured now); prefill at {:.1f}% of it\n", matmul_rate / 1e12,
             100.0 * flops / seconds / matmul_rate);
  // Causal attention adds 4·n²·d·heads/2 per layer (Q·Kᵀ and P·V over the lower triangle).
  const double attention_flops = spec.num_layers * 4.0 * double(tokens) * double(tokens) * double(spec.head_dim) *
                                 double(spec.num_heads) / 2.0;
  fmt::print("with attention  {:.1f} TFLOP/s counting linear + causal attention FLOPs ({:.1f} TFLOP), {:.1f}% of matmul\n",
             (flops + attention_flops) / seconds / 1e12, (flops + attention_flops) / 1e12,
             100.0 * (flops + attention_flops) / seconds / matmul_rate);
}

int run_bench(const BenchArgs& args) {
  if (!args.quant.empty() || !args.batch.empty()) {
    DecodeTableArgs table{args.random_shape, args.device, args.dtype, args.quant, args.batch, args.prompt_tokens,
                          args.decode_tokens};
    if (table.formats.empty()) table.formats = {"none"};
    if (table.batches.empty()) table.batches = {1};
    return run_decode_table(table);
  }
  const Device device = parse_device(args.device);
  const DType dtype = backend::choose_compute_dtype(args.dtype, device);
  std::unique_ptr<backend::Backend> backend =
      device.is_cpu() ? backend::make_cpu_backend() : backend::make_cuda_backend(device.index, dtype);
  std::unique_ptr<model::Transformer> model;
  if (!args.random_shape.empty()) {
    model = model::make_random_transformer(model::random_model_spec(args.random_shape), *backend, 1);
  } else if (!args.model_dir.empty()) {
    model = model::load_transformer(args.model_dir, *backend);
  } else {
    throw Error(ErrorKind::kInvalidArgument, "bench decode needs a MODEL_DIR or --random SHAPE",
                "e.g. tessera bench decode --random internlm2_5-7b --device cuda");
  }
  const model::ModelSpec& spec = model->spec();
  const double element_bytes = static_cast<double>(dtype_bytes(backend->compute_dtype(), 1));
  const double bandwidth = measure_copy_bandwidth(*backend);
  fmt::print("model           {} ({:.2f}B parameters read per token, {} on {})\n",
             args.random_shape.empty() ? args.model_dir : "random " + args.random_shape, parameter_count(spec) / 1e9,
             dtype_name(backend->compute_dtype()), device.to_string());
  fmt::print("copy bandwidth  {:.1f} GB/s (read + write, measured now)\n", bandwidth / 1e9);
  if (args.prefill_tokens > 0) bench_prefill(*model, args.prefill_tokens, measure_matmul_rate(*backend));

  std::vector<int32_t> prompt(args.prompt_tokens);
  for (int64_t i = 0; i < args.prompt_tokens; ++i) prompt[i] = static_cast<int32_t>((i * 7 + 3) % spec.vocab_size);
  engine::GenerateOptions options;
  options.max_new_tokens = std::min<int64_t>(args.decode_tokens, 8);
  engine::generate(*model, prompt, options);  // warm-up
  options.max_new_tokens = args.decode_tokens;
  std::vector<Clock::time_point> token_times;
  auto start = Clock::now();
  engine::generate(*model, prompt, options, [&](int32_t) { token_times.push_back(Clock::now()); });
  const double prefill_seconds = std::chrono::duration<double>(token_times.front() - start).count();
  const double decode_seconds = std::chrono::duration<double>(token_times.back() - token_times.front()).count();
  const double decode_steps = static_cast<double>(token_times.size() - 1);
  const double step_seconds = decode_seconds / decode_steps;
  const double weight_bytes = element_bytes * parameter_count(spec);
  const double kv_bytes = element_bytes * 2 * spec.num_layers * spec.kv_size() *
                          (args.prompt_tokens + args.decode_tokens / 2.0);
  const double limit_seconds = (weight_bytes + kv_bytes) / bandwidth;
  fmt::print("first token     {:.1f} ms after a {}-token prompt\n", prefill_seconds * 1e3, args.prompt_tokens);
  fmt::print("decode          {:.1f} tokens/s ({:.3f} ms/token over {} steps, batch 1)\n", 1.0 / step_seconds,
             step_seconds * 1e3, decode_steps);
  fmt::print("bytes/step      {:.1f} MB (weights + KV cache)\n", (weight_bytes + kv_bytes) / 1e6);
  fmt::print("of the limit    {:.1f}% (bandwidth limit {:.3f} ms/token)\n", 100.0 * limit_seconds / step_seconds,
             limit_seconds * 1e3);
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* decode = bench->add_subcommand("decode", "Single-stream prefill and decode speed against the hardware limit");
  decode->add_option("model_dir", args->model_dir, "model directory (or use --random)");
  decode->add_option("--random", args->random_shape, "a random model of a known shape: 100m, internlm2_5-7b, internlm2_5-20b");
  decode->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  decode->add_option("--dtype", args->dtype, "auto, float16, bfloat16 or float32")->capture_default_str();
  decode->add_option("--prompt-tokens", args->prompt_tokens)->capture_default_str()->check(CLI::PositiveNumber);
  decode->add_option("--decode-tokens", args->decode_tokens)->capture_default_str()->check(CLI::Range(2, 100000));
  decode->add_option("--prefill-tokens", args->prefill_tokens, "also time one prefill of this many tokens")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  decode->add_option("--quant", args->quant,
                     "weight formats to compare in one table: none (16-bit) and/or awq (random 4-bit, groups of 128)")
      ->check(CLI::IsMember({"none", "awq"}));
  decode->add_option("--batch", args->batch, "sequences decoding together, one row each (e.g. 1 16 64)")
      ->check(CLI::PositiveNumber);
  decode->callback([&runner, args] { runner = [args] { return run_bench(*args); }; });
}

}  // namespace tessera::cli
