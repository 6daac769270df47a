// `tessera bench attention`: prefill attention alone, the scalar kernel against
// the tensor-core one, at several prompt lengths of one sequence in the paged
// cache, for a model's attention shape (default: InternLM2.5-7B, 32 query
// heads, 8 KV heads, head_dim 128). Causal attention does 4·n²·d·heads/2
// FLOPs (Q·Kᵀ and P·V over the lower triangle); the table sets its rate
// against a large matmul measured in the same run, the hardware's practical
// limit for 16-bit tensor-core work. --quant-policy 8 or 4 puts random codes
// in the cache (the kernels dequantize them as they stage them; FlashInfer's
// kernel reads 16-bit rows only and has no column).
#include <fmt/format.h>

#include <chrono>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "backend/backend.h"
#include "cli/bench_limits.h"
#include "cli/commands.h"
#include "core/device.h"
#include "core/error.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchAttentionArgs {
  std::string device = "cuda";
  std::string dtype = "auto";
  std::string tokens = "1024,2048,4096,8192";
  int64_t heads = 32, kv_heads = 8, head_dim = 128, block_size = 64;
  int repeats = 5;
  int quant_policy = 0;  // 8 or 4: the cache in 8- or 4-bit codes
};

std::vector<int64_t> parse_lengths(const std::string& list) {
  std::vector<int64_t> lengths;
  std::stringstream stream(list);
  std::string item;
  while (std::getline(stream, item, ',')) {
    try {
      size_t used = 0;
      const int64_t n = std::stoll(item, &used);
      if (used != item.size() || n <= 0) throw std::invalid_argument(item);
      lengths.push_back(n);
    } catch (const std::exception&) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--tokens: '{}' is not a positive token count", item),
                  "give a comma-separated list, e.g. --tokens 1024,4096");
    }
  }
  return lengths;
}

Tensor random_on(backend::Backend& backend, Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(shape_numel(shape));
  for (float& v : values) v = dist(rng);
  return backend.upload_weight(Tensor::from_f32(values, shape));
}

// Random `bits`-bit codes of a quantized cache (backend/paged_kv.h) on the backend.
Tensor random_codes_on(backend::Backend& backend, Shape shape, int bits, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor host = Tensor::empty(shape, bits == 8 ? DType::kU8 : DType::kU4);
  for (size_t i = 0; i < host.nbytes(); ++i) host.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  Tensor device = Tensor::empty(shape, host.dtype(), backend.allocator());
  backend.copy(host, device);
  return device;
}

// Each row's (scale, zero): values between about -1.2 and 1.3, as random_on's.
Tensor random_params_on(backend::Backend& backend, Shape shape, int bits, uint32_t seed) {
  std::mt19937 rng(seed);
  const float levels = static_cast<float>((1 << bits) - 1);
  std::uniform_real_distribution<float> scale(1.0f / levels, 2.5f / levels), zero(-1.2f, -0.8f);
  Tensor host = Tensor::empty(shape, DType::kF32);
  for (int64_t r = 0; r < host.numel() / 2; ++r) {
    host.data<float>()[2 * r] = scale(rng);
    host.data<float>()[2 * r + 1] = zero(rng);
  }
  Tensor device = Tensor::empty(shape, DType::kF32, backend.allocator());
  backend.copy(host, device);
  return device;
}

// One prompt of n tokens attending over itself in the paged cache, as a prefill's layer does.
struct Problem {
  backend::AttentionBatch batch;
  backend::PagedKvLayer cache;
  Tensor qkv, out;
};

Problem make_problem(backend::Backend& backend, const BenchAttentionArgs& a, int64_t n) {
  Problem p;
  const int64_t blocks = (n + a.block_size - 1) / a.block_size;
  p.batch.positions.resize(n);
  std::iota(p.batch.positions.begin(), p.batch.positions.end(), 0);
  p.batch.query_start = {0, static_cast<int32_t>(n)};
  p.batch.block_tables.resize(blocks);
  std::iota(p.batch.block_tables.begin(), p.batch.block_tables.end(), 0);
  p.batch.max_blocks_per_seq = static_cast<int32_t>(blocks);
  const Shape cache_shape = {blocks, a.kv_heads, a.block_size, a.head_dim};
  if (a.quant_policy == 0) {
    p.cache.keys = random_on(backend, cache_shape, 1);
    p.cache.values = random_on(backend, cache_shape, 2);
  } else {
    p.cache.keys = random_codes_on(backend, cache_shape, a.quant_policy, 1);
    p.cache.values = random_codes_on(backend, cache_shape, a.quant_policy, 2);
    p.cache.key_params = random_params_on(backend, {blocks, a.kv_heads, a.block_size, 2}, a.quant_policy, 3);
    p.cache.value_params = random_params_on(backend, {blocks, a.kv_heads, a.block_size, 2}, a.quant_policy, 4);
  }
  p.qkv = random_on(backend, {n, (a.heads + 2 * a.kv_heads) * a.head_dim}, 3);
  p.out = Tensor::empty({n, a.heads * a.head_dim}, backend.compute_dtype(), backend.allocator());
  return p;
}

// Seconds per call of `kernel`, or a negative number with `why` when it cannot run here.
double time_kernel(backend::Backend& backend, const BenchAttentionArgs& a, Problem& p,
                   backend::PrefillAttentionKernel kernel, std::string* why) {
  backend::set_prefill_attention_kernel(kernel);
  try {
    backend.prepare(p.batch);
    backend.paged_attention(p.qkv, a.heads, p.batch, p.cache, a.block_size, p.out);  // warm-up
    backend.synchronize();
    auto start = Clock::now();
    for (int i = 0; i < a.repeats; ++i) backend.paged_attention(p.qkv, a.heads, p.batch, p.cache, a.block_size, p.out);
    backend.synchronize();
    backend::set_prefill_attention_kernel(backend::PrefillAttentionKernel::kAuto);
    return std::chrono::duration<double>(Clock::now() - start).count() / a.repeats;
  } catch (const Error& e) {
    backend::set_prefill_attention_kernel(backend::PrefillAttentionKernel::kAuto);
    if (e.kind() != ErrorKind::kUnsupported) throw;
    *why = e.message();
    return -1.0;
  }
}

int run_bench_attention(const BenchAttentionArgs& a) {
  if (a.heads % a.kv_heads != 0) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--heads {} is not a multiple of --kv-heads {}", a.heads, a.kv_heads));
  }
  const std::vector<int64_t> lengths = parse_lengths(a.tokens);
  const Device device = parse_device(a.device);
  const DType dtype = backend::choose_compute_dtype(a.dtype, device);
  std::unique_ptr<backend::Backend> backend =
      device.is_cpu() ? backend::make_cpu_backend() : backend::make_cuda_backend(device.index, dtype);
  backend->check_supported({a.head_dim, a.heads, a.kv_heads});
  const double matmul = measure_matmul_rate(*backend);
  fmt::print("prefill attention, {} query heads / {} KV heads, head_dim {}, block {}, {} on {}, KV cache in {}\n",
             a.heads, a.kv_heads, a.head_dim, a.block_size, dtype_name(backend->compute_dtype()), device.to_string(),
             backend::kv_cache_format_name(backend::kv_cache_format_for_policy(a.quant_policy)));
  fmt::print("matmul rate {:.1f} TFLOP/s (a large linear layer, measured now); causal FLOPs = 4·n²·d·heads/2\n",
             matmul / 1e12);
  // Each kernel: ms a call, TFLOP/s, and the share of the matmul rate.
  struct Column {
    const char* name;
    backend::PrefillAttentionKernel kernel;
    std::string why;  // why it cannot run here, once it failed
  };
  std::vector<Column> columns = {{"scalar", backend::PrefillAttentionKernel::kScalar, ""}};
  if (!device.is_cpu()) {
    columns.push_back({"tensor-core", backend::PrefillAttentionKernel::kTensorCore, ""});
    if (a.quant_policy == 0) columns.push_back({"flashinfer", backend::PrefillAttentionKernel::kFlashInfer, ""});
  }
  fmt::print("{:>7}", "tokens");
  for (const Column& c : columns) fmt::print("  {:>11} ms {:>7} {:>6}", c.name, "TFLOP/s", "of mm");
  fmt::print("\n");
  for (int64_t n : lengths) {
    Problem p = make_problem(*backend, a, n);
    const double flops = 4.0 * double(n) * double(n) * double(a.head_dim) * double(a.heads) / 2.0;
    fmt::print("{:>7}", n);
    for (Column& c : columns) {
      const double s = time_kernel(*backend, a, p, c.kernel, &c.why);
      if (s < 0) {
        fmt::print("  {:>14} {:>7} {:>6}", "n/a", "", "");
      } else {
        fmt::print("  {:>14.3f} {:>7.1f} {:>5.1f}%", s * 1e3, flops / s / 1e12, 100.0 * flops / s / matmul);
      }
    }
    fmt::print("\n");
  }
  if (device.is_cpu()) fmt::print("(the CPU has one attention kernel; it is the scalar column)\n");
  for (const Column& c : columns) {
    if (!c.why.empty()) fmt::print("{}: {}\n", c.name, c.why);
  }
  return 0;
}

}  // namespace

void add_bench_attention_command(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<BenchAttentionArgs>();
  CLI::App* bench = app.get_subcommand("bench");
  CLI::App* cmd = bench->add_subcommand("attention", "Prefill attention alone: scalar vs tensor-core kernel, TFLOP/s vs matmul");
  cmd->add_option("--device", args->device, "cuda, cuda:N or cpu")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto, float16, bfloat16 or float32")->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "prompt lengths, comma-separated")->capture_default_str();
  cmd->add_option("--heads", args->heads)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--kv-heads", args->kv_heads)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", args->head_dim)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", args->block_size, "KV cache block size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--repeats", args->repeats)->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--quant-policy", args->quant_policy,
                  "the KV cache: 0 (the compute dtype), 8 or 4 (8- or 4-bit codes)")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 4, 8}));
  cmd->callback([&runner, args] { runner = [args] { return run_bench_attention(*args); }; });
}

}  // namespace tessera::cli
