// `tessera bench decode`: single-stream decode speed, reported as tokens/s and
// as a fraction of the memory-bandwidth limit measured in the same run (every
// decode step reads all weights once, so bytes per step ÷ copy bandwidth is the
// fastest a step can be).
#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/generate.h"
#include "model/convert/demo_model.h"
#include "model/transformer.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string model_dir;
  std::string random_shape;  // "100m": a ~100M-parameter random Llama
  int64_t prompt_tokens = 16;
  int64_t decode_tokens = 64;
};

// Host copy bandwidth in bytes/s (read + write of a buffer far larger than caches).
double measure_copy_bandwidth() {
  const size_t bytes = size_t{512} << 20;
  std::vector<char> source(bytes, 1), target(bytes, 0);
  std::memcpy(target.data(), source.data(), bytes);  // fault the pages in first
  double best = 0.0;
  for (int i = 0; i < 3; ++i) {
    auto start = Clock::now();
    std::memcpy(target.data(), source.data(), bytes);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, 2.0 * bytes / seconds);
  }
  return best;
}

int run_bench(const BenchArgs& args) {
  std::filesystem::path model_dir = args.model_dir;
  std::filesystem::path temporary;
  if (!args.random_shape.empty()) {
    if (args.random_shape != "100m") {
      throw Error(ErrorKind::kInvalidArgument, "unknown --random shape '" + args.random_shape + "'", "use --random 100m");
    }
    model::RandomLlamaShape shape{768, 12, 12, 12, 2048, 8192, 4096};
    temporary = std::filesystem::temp_directory_path() / fmt::format("tessera-bench-{}", ::getpid());
    model::write_random_llama(temporary, shape, 1);
    model_dir = temporary;
    log_info("random Llama with {:.1f}M parameters in {}", shape.parameter_count() / 1e6, temporary.string());
  } else if (model_dir.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "bench decode needs a MODEL_DIR or --random 100m");
  }

  std::unique_ptr<backend::Backend> backend = backend::make_cpu_backend();
  std::unique_ptr<model::Transformer> model = model::load_transformer(model_dir, *backend);
  if (!temporary.empty()) std::filesystem::remove_all(temporary);
  const model::ModelSpec& spec = model->spec();

  std::vector<int32_t> prompt(args.prompt_tokens);
  for (int64_t i = 0; i < args.prompt_tokens; ++i) prompt[i] = static_cast<int32_t>((i * 7 + 3) % spec.vocab_size);
  engine::GenerateOptions options;
  options.max_new_tokens = args.decode_tokens;
  std::vector<Clock::time_point> token_times;
  auto start = Clock::now();
  engine::generate(*model, prompt, options, [&](int32_t) { token_times.push_back(Clock::now()); });
  const double prefill_seconds = std::chrono::duration<double>(token_times.front() - start).count();
  const double decode_seconds = std::chrono::duration<double>(token_times.back() - token_times.front()).count();
  const double decode_steps = static_cast<double>(token_times.size() - 1);
  const double step_seconds = decode_seconds / decode_steps;

  // Bytes one decode step must read: every weight (lm_head once even when tied,
  // embedding rows are negligible) in the compute dtype, plus the KV cache so far.
  const double weight_bytes =
      4.0 * (spec.num_layers * (spec.qkv_size() * spec.hidden_size + spec.hidden_size * spec.q_size() +
                                3 * spec.hidden_size * spec.intermediate_size) +
             spec.vocab_size * spec.hidden_size);
  const double kv_bytes =
      4.0 * 2 * spec.num_layers * spec.kv_size() * (args.prompt_tokens + args.decode_tokens / 2.0);
  const double bandwidth = measure_copy_bandwidth();
  const double limit_seconds = (weight_bytes + kv_bytes) / bandwidth;
  fmt::print("model           {}\n", args.random_shape.empty() ? args.model_dir : "random " + args.random_shape);
  fmt::print("prefill         {} tokens in {:.1f} ms ({:.0f} tokens/s)\n", args.prompt_tokens, prefill_seconds * 1e3,
             args.prompt_tokens / prefill_seconds);
  fmt::print("decode          {:.1f} tokens/s ({:.3f} ms/token over {} steps, batch 1)\n", 1.0 / step_seconds,
             step_seconds * 1e3, decode_steps);
  fmt::print("copy bandwidth  {:.2f} GB/s (memcpy, measured now)\n", bandwidth / 1e9);
  fmt::print("bytes/step      {:.1f} MB (f32 weights + KV)\n", (weight_bytes + kv_bytes) / 1e6);
  fmt::print("of the limit    {:.1f}% (limit {:.3f} ms/token)\n", 100.0 * limit_seconds / step_seconds,
             limit_seconds * 1e3);
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* decode = bench->add_subcommand("decode", "Single-stream decode speed against the bandwidth limit");
  decode->add_option("model_dir", args->model_dir, "model directory (or use --random)");
  decode->add_option("--random", args->random_shape, "benchmark a random model instead: 100m");
  decode->add_option("--prompt-tokens", args->prompt_tokens)->capture_default_str()->check(CLI::PositiveNumber);
  decode->add_option("--decode-tokens", args->decode_tokens)->capture_default_str()->check(CLI::Range(2, 100000));
  decode->callback([&runner, args] { runner = [args] { return run_bench(*args); }; });
}

}  // namespace tessera::cli
