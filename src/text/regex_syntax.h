// parse_regex: a regular expression's text into a tree of code-point sets,
// concatenations, alternatives and repetitions, for structured output's
// automata (regex_automaton.h). Only what a finite automaton can enforce is
// taken: literals and escapes, `.`, classes, groups, alternation, the
// quantifiers (lazy ones match the same strings), and `^` / `$`, which
// regex_automaton.h allows at the pattern's ends only. Backreferences,
// lookaround, word boundaries, inline flags and Unicode property escapes are
// refused with Error(kInvalidArgument) naming the construct and its offset.
//
// Two dialects, for where patterns come from: ECMAScript's (JSON Schema's
// `pattern`) and Python's (vLLM's guided_regex, which outlines reads with
// Python's syntax). They differ in `.` (ECMAScript's stops at \n, \r, U+2028
// and U+2029; Python's at \n only), in `[]` and `[^]` (ECMAScript's empty
// and any-character classes; in Python a `]` first in a class is a literal)
// and in \s (each its own whitespace set). \d and \w are ASCII in both
// ([0-9] and [A-Za-z0-9_]); Python's Unicode digits and letters are not
// taken.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace tessera::text {

enum class RegexDialect : uint8_t { kEcmaScript, kPython };

struct CodePointRange {
  char32_t first = 0, last = 0;  // inclusive
  bool operator==(const CodePointRange&) const = default;
};

struct RegexNode {
  enum class Kind : uint8_t {
    kEmpty,        // the empty string
    kChars,        // one code point of `ranges`
    kConcat,       // `children` one after another
    kAlternation,  // one of `children`
    kRepeat,       // children[0], min..max times (max -1: no bound)
    kStart,        // ^ (\A in Python)
    kEnd,          // $ (\Z in Python)
  };
  Kind kind = Kind::kEmpty;
  std::vector<CodePointRange> ranges;  // kChars: sorted, disjoint, no surrogates
  std::vector<RegexNode> children;
  int32_t min = 0, max = -1;           // kRepeat
};

// A repetition's bound may not pass this ({0,5000} is refused).
inline constexpr int32_t kMaxRegexRepeat = 1000;

// Throws Error(kInvalidArgument) "... at offset N of the pattern" for what is
// malformed or not supported. `pattern` must be UTF-8.
RegexNode parse_regex(std::string_view pattern, RegexDialect dialect);

// Sorted, merged, without surrogates; the complement within U+0000..U+10FFFF.
std::vector<CodePointRange> normalize_ranges(std::vector<CodePointRange> ranges);
std::vector<CodePointRange> complement_ranges(const std::vector<CodePointRange>& ranges);
std::vector<CodePointRange> intersect_ranges(const std::vector<CodePointRange>& a,
                                             const std::vector<CodePointRange>& b);

}  // namespace tessera::text
