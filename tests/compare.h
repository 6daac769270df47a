// Numeric closeness as every test here states it: the largest absolute
// difference and the relative norm ||a - b|| / ||b||, both checked.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

namespace tessera::testing {

struct Closeness {
  double max_abs = 0.0;
  double rel_norm = 0.0;
  bool within(double max_abs_bound, double rel_norm_bound) const {
    return max_abs <= max_abs_bound && rel_norm <= rel_norm_bound;
  }
  std::string describe() const {
    return "max abs diff " + std::to_string(max_abs) + ", relative norm " + std::to_string(rel_norm);
  }
};

// `actual` against `expected`, both [count]. NaN anywhere counts as infinitely far.
inline Closeness compare(const float* actual, const float* expected, size_t count) {
  Closeness c;
  double diff_sq = 0.0, ref_sq = 0.0;
  for (size_t i = 0; i < count; ++i) {
    double d = static_cast<double>(actual[i]) - expected[i];
    if (std::isnan(d)) d = INFINITY;
    c.max_abs = std::max(c.max_abs, std::fabs(d));
    diff_sq += d * d;
    ref_sq += static_cast<double>(expected[i]) * expected[i];
  }
  c.rel_norm = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
  return c;
}

}  // namespace tessera::testing
