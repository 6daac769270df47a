#include "text/regex_syntax.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

#include "core/error.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

using Kind = RegexNode::Kind;
using Ranges = std::vector<CodePointRange>;

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kSurrogateFirst = 0xD800, kSurrogateLast = 0xDFFF;

const Ranges kDigits = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript's WhiteSpace and LineTerminator.
const Ranges kEcmaSpace = {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                           {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
// Python's str.isspace() characters, which its \s takes.
const Ranges kPythonSpace = {{0x09, 0x0D},     {0x1C, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},
                             {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                             {0x205F, 0x205F}, {0x3000, 0x3000}};

RegexNode chars(Ranges ranges) {
  RegexNode node;
  node.kind = Kind::kChars;
  node.ranges = normalize_ranges(std::move(ranges));
  return node;
}

RegexNode of_kind(Kind kind) {
  RegexNode node;
  node.kind = kind;
  return node;
}

bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

int hex_value(char32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
  return -1;
}

class Parser {
 public:
  Parser(std::string_view pattern, RegexDialect dialect) : dialect_(dialect) {
    if (const std::optional<size_t> bad = find_invalid_utf8(pattern)) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("the pattern is not valid UTF-8 (byte {})", *bad));
    }
    for (size_t pos = 0; pos < pattern.size();) {
      const size_t length = utf8_sequence_length(pattern, pos);
      text_.push_back(decode(pattern.substr(pos, length)));
      pos += length;
    }
  }

  RegexNode parse() {
    RegexNode root = alternation();
    if (at_end()) return root;
    fail(peek() == ')' ? "unbalanced ')'" : "unexpected character");
  }

 private:
  static char32_t decode(std::string_view s) {
    const auto b0 = static_cast<unsigned char>(s[0]);
    if (s.size() == 1) return b0;
    char32_t c = b0 & (0xFF >> (s.size() + 1));
    for (size_t i = 1; i < s.size(); ++i) c = (c << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
    return c;
  }

  [[noreturn]] void fail(const std::string& what) const { fail_at(what, pos_); }
  [[noreturn]] static void fail_at(const std::string& what, size_t at) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} at offset {} of the pattern", what, at));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char32_t peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : 0; }
  bool has(size_t ahead) const { return pos_ + ahead < text_.size(); }
  char32_t next() {
    if (at_end()) fail("the pattern ends too early");
    return text_[pos_++];
  }

  RegexNode alternation() {
    std::vector<RegexNode> options;
    options.push_back(concatenation());
    while (!at_end() && peek() == '|') {
      ++pos_;
      options.push_back(concatenation());
    }
    if (options.size() == 1) return std::move(options[0]);
    RegexNode node = of_kind(Kind::kAlternation);
    node.children = std::move(options);
    return node;
  }

  RegexNode concatenation() {
    std::vector<RegexNode> parts;
    while (!at_end() && peek() != '|' && peek() != ')') parts.push_back(repetition());
    if (parts.empty()) return of_kind(Kind::kEmpty);
    if (parts.size() == 1) return std::move(parts[0]);
    RegexNode node = of_kind(Kind::kConcat);
    node.children = std::move(parts);
    return node;
  }

  // {n}, {n,}, {n,m} at the current position, or nullopt (then `{` is a literal).
  std::optional<std::pair<int32_t, int32_t>> braces() {
    size_t i = 1;
    const auto number = [&](int32_t& out) {
      const size_t from = i;
      int64_t value = 0;
      while (has(i) && is_digit(peek(i))) {
        value = std::min<int64_t>(value * 10 + (peek(i) - '0'), int64_t{1} << 40);
        ++i;
      }
      out = static_cast<int32_t>(std::min<int64_t>(value, INT32_MAX));
      return i > from;
    };
    int32_t low = 0, high = 0;
    if (!number(low)) return std::nullopt;
    high = low;
    if (has(i) && peek(i) == ',') {
      ++i;
      if (!number(high)) high = -1;
    }
    if (!has(i) || peek(i) != '}') return std::nullopt;
    pos_ += i + 1;
    return std::pair{low, high};
  }

  RegexNode repetition() {
    RegexNode atom_node = atom();
    bool repeated = false;
    while (!at_end()) {
      int32_t low = 0, high = -1;
      const size_t at = pos_;
      const char32_t c = peek();
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_, low = 1;
      } else if (c == '?') {
        ++pos_, high = 1;
      } else if (c == '{') {
        const auto bounds = braces();
        if (!bounds) break;
        std::tie(low, high) = *bounds;
        if (high >= 0 && high < low) fail_at("a repetition's bounds are out of order", at);
        if (std::max(low, high) > kMaxRegexRepeat) {
          fail_at(fmt::format("a repetition bound above {} is not supported", kMaxRegexRepeat), at);
        }
      } else {
        break;
      }
      if (repeated) fail_at("a repetition of a repetition (add a group)", at);
      if (atom_node.kind == Kind::kStart || atom_node.kind == Kind::kEnd) fail_at("nothing to repeat", at);
      if (!at_end() && peek() == '?') ++pos_;  // lazy: the same strings
      if (!at_end() && peek() == '+') fail("possessive quantifiers are not supported");
      RegexNode repeat = of_kind(Kind::kRepeat);
      repeat.min = low;
      repeat.max = high;
      repeat.children.push_back(std::move(atom_node));
      atom_node = std::move(repeat);
      repeated = true;
    }
    return atom_node;
  }

  RegexNode atom() {
    const char32_t c = next();
    switch (c) {
      case '(': return group();
      case '[': return char_class();
      case '.':
        return dialect_ == RegexDialect::kPython ? chars(complement_ranges({{'\n', '\n'}}))
                                                 : chars(complement_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      case '^': return of_kind(Kind::kStart);
      case '$': return of_kind(Kind::kEnd);
      case '*':
      case '+':
      case '?': fail_at("nothing to repeat", pos_ - 1);
      case '{':
        --pos_;
        if (braces()) fail_at("nothing to repeat", pos_ - 1);
        ++pos_;
        return chars({{'{', '{'}});
      case '\\': return escape();
      default: return chars({{c, c}});
    }
  }

  RegexNode group() {
    const size_t at = pos_ - 1;
    if (!at_end() && peek() == '?') {
      const char32_t kind = peek(1);
      if (kind == ':') {
        pos_ += 2;
      } else if (kind == '=' || kind == '!' || (kind == '<' && (peek(2) == '=' || peek(2) == '!'))) {
        fail_at("lookaround assertions are not supported", at);
      } else if (kind == '<' || (kind == 'P' && peek(2) == '<')) {
        pos_ += kind == 'P' ? 3 : 2;
        while (!at_end() && peek() != '>') ++pos_;
        if (at_end()) fail_at("an unterminated group name", at);
        ++pos_;
      } else {
        fail_at("this kind of group ('(?') is not supported: only (...), (?:...) and named groups", at);
      }
    }
    RegexNode inside = alternation();
    if (at_end() || peek() != ')') fail_at("an unterminated group", at);
    ++pos_;
    return inside;
  }

  // \d, \w, \s and their negations; nullopt for other escapes.
  std::optional<Ranges> class_escape(char32_t c) const {
    const Ranges& space = dialect_ == RegexDialect::kPython ? kPythonSpace : kEcmaSpace;
    switch (c) {
      case 'd': return kDigits;
      case 'D': return complement_ranges(kDigits);
      case 'w': return kWord;
      case 'W': return complement_ranges(kWord);
      case 's': return space;
      case 'S': return complement_ranges(space);
      default: return std::nullopt;
    }
  }

  char32_t hex_digits(int count, size_t at) {
    char32_t value = 0;
    for (int i = 0; i < count; ++i) {
      const int digit = at_end() ? -1 : hex_value(peek());
      if (digit < 0) fail_at(fmt::format("an escape needs {} hex digits", count), at);
      ++pos_;
      value = value * 16 + static_cast<char32_t>(digit);
    }
    return value;
  }

  // A single character escape's code point (the backslash read); fails for
  // what is not one. `in_class`: \b is a backspace there.
  char32_t char_escape(char32_t c, size_t at, bool in_class) {
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case 'a':
        if (dialect_ == RegexDialect::kPython) return '\a';
        break;
      case '0':
        if (!at_end() && is_digit(peek())) fail_at("octal escapes are not supported", at);
        return 0;
      case 'x': return hex_digits(2, at);
      case 'u': {
        if (!at_end() && peek() == '{') fail_at("\\u{...} escapes are not supported: use \\uXXXX", at);
        const char32_t unit = hex_digits(4, at);
        if (unit >= 0xD800 && unit <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
          pos_ += 2;
          const char32_t low = hex_digits(4, at);
          if (low < 0xDC00 || low > 0xDFFF) fail_at("a high surrogate escape without its low half", at);
          return 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
        }
        if (unit >= kSurrogateFirst && unit <= kSurrogateLast) fail_at("a lone surrogate escape", at);
        return unit;
      }
      case 'U':
        if (dialect_ == RegexDialect::kPython) {
          const char32_t value = hex_digits(8, at);
          if (value > kMaxCodePoint || (value >= kSurrogateFirst && value <= kSurrogateLast)) {
            fail_at("an escape past U+10FFFF or of a surrogate", at);
          }
          return value;
        }
        break;
      case 'b':
        if (in_class) return '\b';
        fail_at("word-boundary assertions (\\b) are not supported", at);
      case 'B': fail_at("word-boundary assertions (\\B) are not supported", at);
      case 'p':
      case 'P': fail_at("Unicode property escapes are not supported", at);
      case 'k': fail_at("backreferences are not supported", at);
      case 'c': fail_at("control escapes (\\c) are not supported", at);
      default: break;
    }
    if (c >= '1' && c <= '9') fail_at("backreferences are not supported", at);
    if (c < 0x80 && !std::isalnum(static_cast<int>(c))) return c;  // an escaped punctuation mark or space
    if (c >= 0x80) return c;
    fail_at(fmt::format("the escape \\{} is not supported", static_cast<char>(c)), at);
  }

  RegexNode escape() {
    const size_t at = pos_ - 1;
    const char32_t c = next();
    if (std::optional<Ranges> set = class_escape(c)) return chars(std::move(*set));
    if (dialect_ == RegexDialect::kPython) {
      if (c == 'A') return of_kind(Kind::kStart);
      if (c == 'Z') return of_kind(Kind::kEnd);
    }
    const char32_t code_point = char_escape(c, at, false);
    return chars({{code_point, code_point}});
  }

  // One member of a class: a code point, or (set) a class escape's ranges.
  char32_t class_atom(Ranges& set, bool& is_set) {
    const size_t at = pos_;
    const char32_t c = next();
    is_set = false;
    if (c != '\\') return c;
    const char32_t e = next();
    if (std::optional<Ranges> ranges = class_escape(e)) {
      set = std::move(*ranges);
      is_set = true;
      return 0;
    }
    return char_escape(e, at, true);
  }

  RegexNode char_class() {
    const size_t at = pos_ - 1;
    bool negated = false;
    if (!at_end() && peek() == '^') {
      negated = true;
      ++pos_;
    }
    Ranges ranges;
    bool first = true;
    while (true) {
      if (at_end()) fail_at("an unterminated character class", at);
      if (peek() == ']' && !(first && dialect_ == RegexDialect::kPython)) {
        ++pos_;
        break;
      }
      first = false;
      Ranges set;
      bool is_set = false;
      const size_t member_at = pos_;
      const char32_t low = class_atom(set, is_set);
      if (!at_end() && peek() == '-' && has(1) && peek(1) != ']') {
        ++pos_;
        Ranges high_set;
        bool high_is_set = false;
        const char32_t high = class_atom(high_set, high_is_set);
        if (is_set || high_is_set) fail_at("a range with a class escape at an end", member_at);
        if (high < low) fail_at("a range out of order", member_at);
        ranges.push_back({low, high});
      } else if (is_set) {
        ranges.insert(ranges.end(), set.begin(), set.end());
      } else {
        ranges.push_back({low, low});
      }
    }
    ranges = normalize_ranges(std::move(ranges));
    return chars(negated ? complement_ranges(ranges) : std::move(ranges));
  }

  RegexDialect dialect_;
  std::vector<char32_t> text_;
  size_t pos_ = 0;
};

}  // namespace

Ranges normalize_ranges(Ranges ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const CodePointRange& a, const CodePointRange& b) {
    return a.first < b.first;
  });
  Ranges merged;
  for (const CodePointRange& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().last + 1) {
      merged.back().last = std::max(merged.back().last, r.last);
    } else {
      merged.push_back(r);
    }
  }
  // Surrogates are not characters: UTF-8 cannot carry them.
  Ranges out;
  for (const CodePointRange& r : merged) {
    if (r.last < kSurrogateFirst || r.first > kSurrogateLast) {
      out.push_back(r);
      continue;
    }
    if (r.first < kSurrogateFirst) out.push_back({r.first, kSurrogateFirst - 1});
    if (r.last > kSurrogateLast) out.push_back({kSurrogateLast + 1, r.last});
  }
  return out;
}

Ranges complement_ranges(const Ranges& ranges) {
  Ranges out;
  char32_t from = 0;
  for (const CodePointRange& r : normalize_ranges(ranges)) {
    if (r.first > from) out.push_back({from, r.first - 1});
    from = r.last + 1;
  }
  if (from <= kMaxCodePoint) out.push_back({from, kMaxCodePoint});
  return normalize_ranges(std::move(out));
}

Ranges intersect_ranges(const Ranges& a, const Ranges& b) {
  Ranges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const char32_t first = std::max(a[i].first, b[j].first), last = std::min(a[i].last, b[j].last);
    if (first <= last) out.push_back({first, last});
    if (a[i].last < b[j].last) ++i;
    else ++j;
  }
  return out;
}

RegexNode parse_regex(std::string_view pattern, RegexDialect dialect) { return Parser(pattern, dialect).parse(); }

}  // namespace tessera::text
