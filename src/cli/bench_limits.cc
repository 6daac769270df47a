#include "cli/bench_limits.h"

#include <random>
#include <vector>

namespace tessera::cli {

double measure_copy_bandwidth(backend::Backend& backend) {
  const int64_t bytes = backend.device().is_cpu() ? (int64_t{512} << 20) : (int64_t{2} << 30);
  Tensor a = Tensor::empty({bytes}, DType::kU8, backend.allocator());
  Tensor b = Tensor::empty({bytes}, DType::kU8, backend.allocator());
  return 2.0 * static_cast<double>(bytes) / backend.time_per_call([&] { backend.copy(a, b); }, 5);
}

namespace {
Tensor random_operand(backend::Backend& backend, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n * n));
  for (float& v : values) v = dist(rng);
  return backend.upload_weight(Tensor::from_f32(values, {n, n}));
}
}  // namespace

double measure_matmul_rate(backend::Backend& backend) {
  const int64_t n = backend.device().is_cpu() ? 1024 : 8192;
  Tensor x = random_operand(backend, n, 1), w = random_operand(backend, n, 2);
  Tensor y = Tensor::empty({n, n}, backend.compute_dtype(), backend.allocator());
  const int repeats = backend.device().is_cpu() ? 2 : 10;
  const double seconds = backend.time_per_call([&] { backend.linear(x, w, Tensor(), y); }, repeats);
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / seconds;
}

}  // namespace tessera::cli
