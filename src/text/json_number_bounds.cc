#include "text/json_number_bounds.h"

#include <algorithm>
#include <cmath>

namespace tessera::text {
namespace {

// 10^k for k in [0, 22]: exact doubles.
double power_of_ten(int k) {
  static const double table[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  return table[k];
}

uint64_t integer_power_of_ten(int k) {
  uint64_t v = 1;
  for (int i = 0; i < k; ++i) v *= 10;
  return v;
}

// The double a reader makes of ±c / 10^p: c < 2^53 and 10^p are exact, so
// the one rounding of the division is the only one, as in strtod.
double value_of(bool negative, uint64_t c, int p) {
  const double v = static_cast<double>(c) / power_of_ten(p);
  return negative ? -v : v;
}

bool above_minimum(const JsonNumberBounds& b, double v) {
  return !b.has_minimum || (b.exclusive_minimum ? v > b.minimum : v >= b.minimum);
}
bool below_maximum(const JsonNumberBounds& b, double v) {
  return !b.has_maximum || (b.exclusive_maximum ? v < b.maximum : v <= b.maximum);
}

// Whether some c in [first, last] gives ±c / 10^p within the bounds. The
// value moves one way with c, so one side's test is false then true along c
// ("rises") and the other's true then false: the first c where the rising
// one holds is the only candidate for the falling one.
bool grid_within(const JsonNumberBounds& b, bool negative, uint64_t first, uint64_t last, int p) {
  if (first > last) return false;
  const auto rises = [&](uint64_t c) {
    const double v = value_of(negative, c, p);
    return negative ? below_maximum(b, v) : above_minimum(b, v);
  };
  const auto falls = [&](uint64_t c) {
    const double v = value_of(negative, c, p);
    return negative ? above_minimum(b, v) : below_maximum(b, v);
  };
  uint64_t c = first;
  if (!rises(first)) {
    // Near where the rising side's bound is, then to the exact first c.
    const bool has = negative ? b.has_maximum : b.has_minimum;
    if (!has) return false;  // cannot happen: a side without a bound always holds
    const double bound = std::fabs(negative ? b.maximum : b.minimum);
    const long double estimate = static_cast<long double>(bound) * static_cast<long double>(power_of_ten(p));
    if (!(estimate <= static_cast<long double>(last) + 2)) return false;
    c = std::clamp<uint64_t>(static_cast<uint64_t>(std::max<long double>(estimate, 0)), first, last);
    while (c > first && rises(c - 1)) --c;
    while (c <= last && !rises(c)) ++c;
    if (c > last) return false;
  }
  return falls(c);
}

}  // namespace

bool JsonNumberBounds::contains(bool negative, uint64_t digits, int fraction_digits) const {
  const double v = value_of(negative, digits, fraction_digits);
  return above_minimum(*this, v) && below_maximum(*this, v);
}

bool number_may_end_within(const JsonNumberBounds& b, bool negative, NumberPart part, uint64_t digits,
                           int digit_count, int fraction_digits) {
  constexpr int kMax = JsonNumberBounds::kMaxDigits;
  const int left = kMax - digit_count;  // digits that may still come
  if (left < 0) return false;
  switch (part) {
    case NumberPart::kSign:
      // i integer digits, then kMax - i fraction digits at most: c over all of them.
      for (int i = 1; i <= kMax; ++i) {
        const int p = kMax - i;
        const uint64_t first = i == 1 ? 0 : integer_power_of_ten(i - 1 + p);
        if (grid_within(b, negative, first, integer_power_of_ten(i + p) - 1, p)) return true;
      }
      return false;
    case NumberPart::kZero:  // 0, or 0.f with up to `left` fraction digits
      return grid_within(b, negative, 0, integer_power_of_ten(left) - 1, left);
    case NumberPart::kInteger:
      // j more integer digits, then left - j fraction digits at most.
      for (int j = 0; j <= left; ++j) {
        const uint64_t scale = integer_power_of_ten(left);
        if (grid_within(b, negative, digits * scale, (digits + 1) * scale - 1, left - j)) return true;
      }
      return false;
    case NumberPart::kPoint:  // at least one fraction digit must come
      if (left < 1) return false;
      return grid_within(b, negative, digits * integer_power_of_ten(left), (digits + 1) * integer_power_of_ten(left) - 1,
                         left);
    case NumberPart::kFraction:
      return grid_within(b, negative, digits * integer_power_of_ten(left), (digits + 1) * integer_power_of_ten(left) - 1,
                         fraction_digits + left);
  }
  return false;
}

}  // namespace tessera::text
