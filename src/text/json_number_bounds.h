// JSON Schema's bounds on a number (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum) as structured output enforces them while the number is
// written: after each byte, whether some way of finishing the number lands
// within the bounds. A value is compared as readers compare it: the decimal
// text read as the nearest double (Python's json and jsonschema do so).
//
// A bounded number is written without an exponent and with at most
// kMaxDigits digits, so that its digits are one integer c below 2^53 and its
// value c / 10^k is one correctly rounded division, the double strtod gives.
#pragma once

#include <cstdint>

namespace tessera::text {

struct JsonNumberBounds {
  static constexpr int kMaxDigits = 15;
  bool has_minimum = false, has_maximum = false;
  bool exclusive_minimum = false, exclusive_maximum = false;
  double minimum = 0.0, maximum = 0.0;

  bool any() const { return has_minimum || has_maximum; }
  // Whether ±digits / 10^fraction_digits is within the bounds.
  bool contains(bool negative, uint64_t digits, int fraction_digits) const;
};

// Where a bounded number's text is: nothing or only "-" (kSign), "0" or
// "-0" (kZero), integer digits (kInteger), a point after them (kPoint), or
// fraction digits (kFraction).
enum class NumberPart : uint8_t { kSign, kZero, kInteger, kPoint, kFraction };

// Whether the text so far (its sign, its digits read as one integer, how many
// digits it has and how many of them follow the point) can still be finished,
// within kMaxDigits digits, as a number within `bounds`.
bool number_may_end_within(const JsonNumberBounds& bounds, bool negative, NumberPart part, uint64_t digits,
                           int digit_count, int fraction_digits);

}  // namespace tessera::text
