#include "text/json_matcher.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace tessera::text {
namespace {

using Frame = JsonMatcher::Frame;
using FrameKind = JsonMatcher::FrameKind;
using Kind = GrammarNode::Kind;

// Frame states.
enum ObjectState : uint8_t { kObjectOpen, kObjectNextKey, kObjectColon, kObjectAfterValue };
enum ArrayState : uint8_t { kArrayOpen, kArrayAfterValue };
enum StringState : uint8_t { kChars, kEscape, kHex, kUtf8 };
enum NumberState : uint8_t { kStart, kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits, kNoNumberState };

// anyOf inside anyOf (a $ref is one) deeper than this is taken as a cycle.
constexpr int kMaxOptionDepth = 16;
// An integer's magnitude stops growing here (past every bound, ±9e15).
constexpr uint64_t kSaturated = uint64_t{1} << 60;

bool is_whitespace(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool number_complete(uint8_t state) {
  return state == kZero || state == kInt || state == kFrac || state == kExpDigits;
}

// Where a bounded number (no exponent) is, for json_number_bounds.h.
NumberPart number_part(uint8_t state) {
  switch (state) {
    case kZero: return NumberPart::kZero;
    case kInt: return NumberPart::kInteger;
    case kDot: return NumberPart::kPoint;
    case kFrac: return NumberPart::kFraction;
    default: return NumberPart::kSign;
  }
}

Frame frame(FrameKind kind, int32_t node) {
  Frame f;
  f.kind = kind;
  f.node = node;
  return f;
}

uint64_t first_bits(size_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

// Calls fn(i) for each set bit i of `bits`.
template <typename Fn>
void for_each_bit(uint64_t bits, Fn fn) {
  while (bits != 0) {
    fn(std::countr_zero(bits));
    bits &= bits - 1;
  }
}

// The next number state after `c`, or kNoNumberState.
// `integer`: no fraction and no exponent; `bounded`: no exponent (json_number_bounds.h).
uint8_t number_step(uint8_t state, uint8_t c, bool integer, bool bounded) {
  const bool digit = is_digit(c), exponent = (c == 'e' || c == 'E') && !integer && !bounded;
  const bool dot = c == '.' && !integer;
  switch (state) {
    case kStart: return c == '-' ? kMinus : c == '0' ? kZero : digit ? kInt : kNoNumberState;
    case kMinus: return c == '0' ? kZero : digit ? kInt : kNoNumberState;
    case kZero: return dot ? kDot : exponent ? kExp : kNoNumberState;
    case kInt: return digit ? kInt : dot ? kDot : exponent ? kExp : kNoNumberState;
    case kDot: return digit ? kFrac : kNoNumberState;
    case kFrac: return digit ? kFrac : exponent ? kExp : kNoNumberState;
    case kExp: return c == '+' || c == '-' ? kExpSign : digit ? kExpDigits : kNoNumberState;
    case kExpSign:
    case kExpDigits: return digit ? kExpDigits : kNoNumberState;
    default: return kNoNumberState;
  }
}

// An integer's bounds, as the range of its magnitude x (the digits written so
// far, and those to come) for the sign it has: [low, high], or [low, ∞)
// without `capped`. (A sentinel high would collide: minimum 1 leaves the
// negative side high = -1, an empty range, not an unbounded one.)
struct MagnitudeRange {
  __int128 low = 0, high = 0;
  bool capped = false;
};

MagnitudeRange magnitude_range(const GrammarNode& n, bool negative) {
  // value = x, or -x when negative: x in [min, max], or in [-max, -min].
  MagnitudeRange r;
  if (!negative) {
    if (n.has_minimum) r.low = std::max<__int128>(0, n.minimum);
    if (n.has_maximum) r.high = n.maximum, r.capped = true;
  } else {
    if (n.has_maximum) r.low = std::max<__int128>(0, -static_cast<__int128>(n.maximum));
    if (n.has_minimum) r.high = -static_cast<__int128>(n.minimum), r.capped = true;
  }
  if (n.multiple_of > 0) {  // at most kMultipleMaxDigits digits
    r.high = r.capped ? std::min<__int128>(r.high, GrammarNode::kMultipleLargest) : GrammarNode::kMultipleLargest;
    r.capped = true;
  }
  return r;
}

// Whether the magnitude x is one the node takes: within its range and,
// under multipleOf, a multiple (of a magnitude, as of the value).
bool magnitude_taken(const GrammarNode& n, const MagnitudeRange& r, __int128 x) {
  return x >= r.low && (!r.capped || x <= r.high) && (n.multiple_of == 0 || x % n.multiple_of == 0);
}

// Whether some magnitude in [from, to] is taken (`to` within the range's cap).
bool taken_between(const GrammarNode& n, const MagnitudeRange& r, __int128 from, __int128 to) {
  from = std::max(from, r.low);
  if (n.multiple_of > 0) from = (from + n.multiple_of - 1) / n.multiple_of * n.multiple_of;
  return from <= to;
}

// Whether an integer can still end as one the node takes: no digit yet
// (`digits` 0: any magnitude), a leading zero (only 0 itself), or the
// magnitude `x` so far followed by j more digits, x * 10^j .. (x + 1) * 10^j
// - 1 for some j.
bool integer_may_end_in_range(const GrammarNode& n, bool negative, int digits, bool zero, uint64_t x) {
  const MagnitudeRange r = magnitude_range(n, negative);
  if (r.capped && r.high < r.low) return false;
  if (zero) return magnitude_taken(n, r, 0);
  if (!r.capped) return true;  // and so no multipleOf either
  if (digits == 0) return taken_between(n, r, 0, r.high);
  __int128 from = x, to = x;
  for (int j = digits; j <= JsonMatcher::kMaxDigits && from <= r.high; ++j) {
    if (taken_between(n, r, from, std::min(to, r.high))) return true;
    from *= 10;
    to = to * 10 + 9;
  }
  return false;
}

// The byte a short escape's letter stands for (\" \\ \/ \b \f \n \r \t), or 0.
uint8_t short_escape(uint8_t c) {
  switch (c) {
    case '"': return '"';
    case '\\': return '\\';
    case '/': return '/';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return 0;
  }
}

// A UTF-8 lead byte: how many continuation bytes follow and the first one's range.
bool utf8_lead(uint8_t c, Frame& f) {
  f.low = 0x80;
  f.high = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) f.pending = 1;
  else if (c == 0xE0) f.pending = 2, f.low = 0xA0;
  else if (c == 0xED) f.pending = 2, f.high = 0x9F;  // no surrogates
  else if (c >= 0xE1 && c <= 0xEF) f.pending = 2;
  else if (c == 0xF0) f.pending = 3, f.low = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) f.pending = 3;
  else if (c == 0xF4) f.pending = 3, f.high = 0x8F;  // up to U+10FFFF
  else return false;
  return true;
}

}  // namespace

JsonMatcher::JsonMatcher(const JsonGrammar& grammar) : grammar_(&grammar) {
  frames_.push_back(frame(FrameKind::kValue, grammar.root));
  ends_.push_back(1);
}

bool JsonMatcher::advance(uint8_t byte) {
  JsonMatcher next(*grammar_);
  if (!next.assign_advanced(*this, byte)) return false;
  *this = std::move(next);
  return true;
}

bool JsonMatcher::advance(std::string_view bytes) {
  JsonMatcher next = *this;
  for (char c : bytes) {
    if (!next.advance(static_cast<uint8_t>(c))) return false;
  }
  *this = std::move(next);
  return true;
}

bool JsonMatcher::assign_advanced(const JsonMatcher& from, uint8_t byte) {
  grammar_ = from.grammar_;
  frames_.clear();
  ends_.clear();
  uint32_t begin = 0;
  for (uint32_t end : from.ends_) {
    work_.assign(from.frames_.begin() + begin, from.frames_.begin() + end);
    feed(work_, byte, frames_, ends_, 0);
    begin = end;
  }
  return !ends_.empty();
}

void JsonMatcher::add_stack(const Stack& stack, std::vector<Frame>& frames, std::vector<uint32_t>& ends) const {
  uint32_t begin = 0;
  for (uint32_t end : ends) {
    if (end - begin == stack.size() && std::equal(stack.begin(), stack.end(), frames.begin() + begin)) return;
    begin = end;
  }
  if (ends.size() >= kMaxAlternatives) return;
  frames.insert(frames.end(), stack.begin(), stack.end());
  ends.push_back(static_cast<uint32_t>(frames.size()));
}

uint64_t JsonMatcher::key_window(const Frame& f) const {
  const auto& properties = grammar_->nodes[f.node].properties;
  uint64_t window = 0;
  for (size_t i = static_cast<size_t>(f.a); i < properties.size(); ++i) {
    window |= uint64_t{1} << i;
    if (properties[i].required) break;
  }
  return window;
}

bool JsonMatcher::may_close_object(const Frame& f) const {
  const GrammarNode& n = grammar_->nodes[f.node];
  if (n.free_keys) return f.a >= n.min_properties;  // a map's `a`: its keys so far
  for (size_t i = static_cast<size_t>(f.a); i < n.properties.size(); ++i) {
    if (n.properties[i].required) return false;
  }
  return true;
}

void JsonMatcher::feed(Stack& s, uint8_t c, std::vector<Frame>& frames, std::vector<uint32_t>& ends,
                       int option_depth) const {
  const std::vector<GrammarNode>& nodes = grammar_->nodes;
  const bool ws = is_whitespace(c);
  const auto take = [&] { add_stack(s, frames, ends); };
  // Whitespace a structural frame takes, up to the grammar's cap.
  const auto take_whitespace = [&](Frame& f) {
    if (f.whitespace >= grammar_->max_whitespace) return;
    ++f.whitespace;
    take();
  };
  while (!s.empty()) {  // an empty stack is a whole value: nothing may follow
    Frame& f = s.back();
    switch (f.kind) {
      case FrameKind::kValue: {
        const GrammarNode& n = nodes[f.node];
        // Whitespace before a JSON value; raw text, a sequence's parts and
        // an anyOf's options say their own.
        if (ws && !n.raw && n.kind != Kind::kSequence && n.kind != Kind::kAnyOf) return take_whitespace(f);
        switch (n.kind) {
          case Kind::kAnyOf:
            if (option_depth >= kMaxOptionDepth) return;
            for (int32_t option : n.options) {
              Stack copy = s;
              copy.back().node = option;
              feed(copy, c, frames, ends, option_depth + 1);
            }
            return;
          case Kind::kAny:
            if (c == '{') f.node = JsonGrammar::kAnyObject;
            else if (c == '[') f.node = JsonGrammar::kAnyArray;
            else if (c == '"') f.node = JsonGrammar::kAnyString;
            else if (c == 't' || c == 'f') f.node = JsonGrammar::kBoolean;
            else if (c == 'n') f.node = JsonGrammar::kNull;
            else if (c == '-' || is_digit(c)) f = frame(FrameKind::kNumber, f.node);
            else return;
            continue;
          case Kind::kObject:
            if (c != '{') return;
            f = frame(FrameKind::kObject, f.node);
            return take();
          case Kind::kArray:
            if (c != '[') return;
            f = frame(FrameKind::kArray, f.node);
            return take();
          case Kind::kString:
            if (c != '"') return;
            f = frame(FrameKind::kString, f.node);
            return take();
          case Kind::kNumber:
          case Kind::kInteger:
            f = frame(FrameKind::kNumber, f.node);
            f.b = n.kind == Kind::kInteger ? 1 : 0;
            continue;
          case Kind::kLiterals:
            f = frame(FrameKind::kLiterals, f.node);
            f.alive = first_bits(n.literals.size()) & ~taken_by_array(s);
            continue;
          case Kind::kSequence:
            f = frame(FrameKind::kSequence, f.node);
            continue;
          case Kind::kRegex:
            f = frame(FrameKind::kRegex, f.node);
            f.b = grammar_->patterns[static_cast<size_t>(n.pattern)]->start();
            continue;
        }
        return;
      }
      case FrameKind::kRegex: {
        const RegexAutomaton& automaton = pattern_of(f);
        const int32_t next = automaton.next(f.b, c);
        if (next != RegexAutomaton::kDead) {
          f.b = next;
          if (!automaton.extendable(next)) s.pop_back();  // a whole match that nothing extends
          return take();
        }
        if (!automaton.accepting(f.b)) return;
        s.pop_back();  // the byte belongs to what follows the match
        continue;
      }
      case FrameKind::kSequence: {
        // The next part takes the byte; the last part replaces the sequence,
        // so that the stack empties with it.
        const std::vector<int32_t>& parts = nodes[f.node].options;
        const int32_t part = parts[static_cast<size_t>(f.a)];
        if (static_cast<size_t>(f.a) + 1 == parts.size()) {
          f = frame(FrameKind::kValue, part);
        } else {
          ++f.a;
          s.push_back(frame(FrameKind::kValue, part));
        }
        continue;
      }
      case FrameKind::kObject: {
        if (ws) return take_whitespace(f);
        const GrammarNode& n = nodes[f.node];
        f.whitespace = 0;
        switch (f.state) {
          case kObjectOpen:
          case kObjectNextKey:
            if (c == '}' && f.state == kObjectOpen && may_close_object(f)) {
              s.pop_back();
              return take();
            }
            if (c != '"') return;
            f.state = kObjectColon;
            if (n.free_keys) {
              if (n.max_properties >= 0 && f.a >= n.max_properties) return;
              ++f.a;
              if (n.keys >= 0 && nodes[n.keys].kind == Kind::kLiterals) {
                // An enum's keys: their texts, past the opening quote just taken.
                Frame key = frame(FrameKind::kLiterals, n.keys);
                key.alive = first_bits(nodes[n.keys].literals.size());
                key.a = 1;
                s.push_back(key);
              } else {
                s.push_back(frame(FrameKind::kString, n.keys >= 0 ? n.keys : JsonGrammar::kAnyString));
              }
            } else {
              const uint64_t window = key_window(f);
              if (window == 0) return;
              Frame key = frame(FrameKind::kKey, f.node);
              key.alive = window;
              s.push_back(key);
            }
            return take();
          case kObjectColon: {
            if (c != ':') return;
            f.state = kObjectAfterValue;
            const int32_t value = !n.free_keys ? f.b : n.additional >= 0 ? n.additional : JsonGrammar::kAnyValue;
            s.push_back(frame(FrameKind::kValue, value));
            return take();
          }
          default:  // kObjectAfterValue
            if (c == ',') {
              if (n.free_keys ? n.max_properties >= 0 && f.a >= n.max_properties : key_window(f) == 0) return;
              f.state = kObjectNextKey;
              return take();
            }
            if (c == '}' && may_close_object(f)) {
              s.pop_back();
              return take();
            }
            return;
        }
      }
      case FrameKind::kKey: {
        const auto& properties = nodes[f.node].properties;
        uint64_t alive = 0;
        for_each_bit(f.alive, [&](int i) {
          const std::string& key = properties[i].key;
          if (static_cast<size_t>(f.a) < key.size() && static_cast<uint8_t>(key[f.a]) == c) alive |= uint64_t{1} << i;
        });
        if (alive == 0) return;
        f.alive = alive;
        ++f.a;
        if (c == '"') {
          // A key's text ends at its only unescaped quote, so at most one ends here.
          int done = -1;
          for_each_bit(alive, [&](int i) {
            if (properties[i].key.size() == static_cast<size_t>(f.a)) done = i;
          });
          if (done >= 0) {
            s.pop_back();
            s.back().a = done + 1;
            s.back().b = properties[done].value;
          }
        }
        return take();
      }
      case FrameKind::kArray: {
        if (ws) return take_whitespace(f);
        const GrammarNode& n = nodes[f.node];
        // The node of item number `count` (from 1): its tuple position's, else items'.
        const auto item = [&](int32_t count) {
          const auto at = static_cast<size_t>(count - 1);
          return at < n.prefix.size() ? n.prefix[at] : n.items >= 0 ? n.items : JsonGrammar::kAnyValue;
        };
        f.whitespace = 0;
        if (f.state == kArrayOpen) {
          if (c == ']') {
            if (n.min_items > 0) return;
            s.pop_back();
            return take();
          }
          if (n.max_items == 0) return;
          f.state = kArrayAfterValue;
          f.a = 1;
          s.push_back(frame(FrameKind::kValue, item(1)));
          continue;  // the byte starts the first item
        }
        if (c == ',') {
          if (n.max_items >= 0 && f.a >= n.max_items) return;
          ++f.a;
          s.push_back(frame(FrameKind::kValue, item(f.a)));
          return take();
        }
        if (c == ']' && f.a >= n.min_items) {
          s.pop_back();
          return take();
        }
        return;
      }
      case FrameKind::kString: {
        const GrammarNode& n = nodes[f.node];
        if (n.pattern >= 0) {
          if (feed_pattern_string(s, c)) take();
          return;
        }
        switch (f.state) {
          case kUtf8:
            if (c < f.low || c > f.high) return;
            f.low = 0x80;
            f.high = 0xBF;
            if (--f.pending == 0) f.state = kChars, f.low = f.high = 0;
            return take();
          case kEscape:
            if (c == 'u') {
              f.state = kHex;
              f.pending = 4;
              f.b = 0;
              return take();
            }
            if (c == 0 || std::strchr("\"\\/bfnrt", c) == nullptr) return;
            if (n.max_length >= 0 && f.a >= n.max_length) return;
            ++f.a;
            f.state = kChars;
            f.low = 0;
            return take();
          case kHex: {
            if (!is_hex(c)) return;
            f.b = f.b * 16 + (is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
            if (--f.pending > 0) return take();
            // A low surrogate's escape after a high one's is the same code
            // point: counted once, as JSON readers (and maxLength) count it.
            if (!(f.b >= 0xDC00 && f.b <= 0xDFFF && f.low == 1)) {
              if (n.max_length >= 0 && f.a >= n.max_length) return;
              ++f.a;
            }
            f.high = f.b >= 0xD800 && f.b <= 0xDBFF ? 1 : 0;
            f.state = kChars;
            f.low = 0;
            f.b = 0;
            return take();
          }
          default: {  // kChars; high == 1: the last character was a high surrogate's escape
            const uint8_t after_high_surrogate = f.high;
            f.high = 0;
            if (c == '"') {
              if (f.a < n.min_length) return;
              s.pop_back();
              return take();
            }
            if (c < 0x20) return;
            const bool full = n.max_length >= 0 && f.a >= n.max_length;
            if (c == '\\') {  // counted once the escape is whole
              if (full && after_high_surrogate == 0) return;
              f.state = kEscape;
              f.low = after_high_surrogate;  // kept through the escape
              return take();
            }
            if (full) return;
            if (c >= 0x80) {
              if (!utf8_lead(c, f)) return;
              f.state = kUtf8;
            }
            ++f.a;
            return take();
          }
        }
      }
      case FrameKind::kNumber: {
        const JsonNumberBounds& bounds = nodes[f.node].number_bounds;
        const bool bounded_number = nodes[f.node].kind == Kind::kNumber && bounds.any();
        const bool too_long = is_digit(c) && f.a >= (bounded_number ? JsonNumberBounds::kMaxDigits : kMaxDigits);
        uint8_t next = too_long ? uint8_t{kNoNumberState} : number_step(f.state, c, f.b != 0, bounded_number);
        if (next != kNoNumberState && bounded_number) {
          // Its sign in `pending`, its digits as one integer in `alive`, those after the point in `low`.
          const bool negative = f.pending != 0 || c == '-';
          const uint64_t digits = is_digit(c) ? f.alive * 10 + (c - '0') : f.alive;
          const int count = f.a + (is_digit(c) ? 1 : 0);
          const int fraction = f.low + (next == kFrac && is_digit(c) ? 1 : 0);
          if (number_may_end_within(bounds, negative, number_part(next), digits, count, fraction)) {
            f.pending = negative ? 1 : 0;
            f.alive = digits;
            f.low = static_cast<uint8_t>(fraction);
          } else {
            next = kNoNumberState;
          }
        }
        if (next != kNoNumberState && bounded(f)) {
          // An integer's magnitude so far in `alive`, its sign in `pending`.
          const bool negative = f.pending != 0 || c == '-';
          const uint64_t x = is_digit(c) ? std::min<uint64_t>(f.alive * 10 + (c - '0'), kSaturated) : f.alive;
          const int digits = f.a + (is_digit(c) ? 1 : 0);
          if (integer_may_end_in_range(nodes[f.node], negative, digits, next == kZero, x)) {
            f.pending = negative ? 1 : 0;
            f.alive = x;
          } else {
            next = kNoNumberState;
          }
        }
        if (next != kNoNumberState) {
          if (is_digit(c)) ++f.a;
          f.state = next;
          return take();
        }
        if (!number_whole(f)) return;
        s.pop_back();  // the byte belongs to what follows the number
        continue;
      }
      case FrameKind::kLiterals: {
        const auto& literals = nodes[f.node].literals;
        const auto at = static_cast<size_t>(f.a);
        uint64_t alive = 0;
        bool complete = false;
        for_each_bit(f.alive, [&](int i) {
          const std::string& text = literals[i];
          if (text.size() == at) complete = true;
          else if (static_cast<uint8_t>(text[at]) == c) alive |= uint64_t{1} << i;
        });
        if (alive != 0) {
          f.alive = alive;
          ++f.a;
          bool grows = false;
          for_each_bit(alive, [&](int i) { grows |= literals[i].size() > at + 1; });
          if (!grows) {  // whole (the one literal of this text): what follows is the parent's
            const uint64_t written = alive & (~alive + 1);
            s.pop_back();
            mark_taken(s, written);
          }
          return take();
        }
        if (!complete) return;
        uint64_t written = 0;
        for_each_bit(f.alive, [&](int i) {
          if (literals[i].size() == at) written = uint64_t{1} << i;
        });
        s.pop_back();  // the byte belongs to what follows the literal
        mark_taken(s, written);
        continue;
      }
    }
    return;
  }
}

uint64_t JsonMatcher::taken_by_array(const Stack& s) const {
  if (s.size() < 2) return 0;
  const Frame& parent = s[s.size() - 2];
  return parent.kind == FrameKind::kArray && grammar_->nodes[parent.node].distinct_items >= 0 ? parent.alive : 0;
}

void JsonMatcher::mark_taken(Stack& s, uint64_t literal) const {
  if (s.empty()) return;
  Frame& top = s.back();
  if (top.kind == FrameKind::kArray && grammar_->nodes[top.node].distinct_items >= 0) top.alive |= literal;
}

bool JsonMatcher::feed_pattern_string(Stack& s, uint8_t c) const {
  Frame& f = s.back();
  const RegexAutomaton& automaton = pattern_of(f);
  // With a counted maximum (GrammarNode::counted_max_length), f.a counts the
  // characters, and a byte is taken only where a match can still end within
  // the maximum: the characters so far and the fewest still needed.
  const int64_t most = grammar_->nodes[f.node].counted_max_length;
  const auto fits = [&](int32_t next, int64_t count) {
    return next != RegexAutomaton::kDead && (most < 0 || count + automaton.chars_to_accept(next) <= most);
  };
  if (f.state == kEscape) {
    const uint8_t decoded = short_escape(c);
    if (decoded == 0) return false;
    const int32_t next = automaton.next(f.b, decoded);
    if (!fits(next, f.a + 1)) return false;
    f.b = next;
    ++f.a;
    f.state = kChars;
    return true;
  }
  if (c == '"') {
    if (!automaton.accepting(f.b)) return false;
    s.pop_back();
    return true;
  }
  if (c < 0x20) return false;
  if (c == '\\') {
    // Only when some escaped byte goes on to a match.
    for (const char* e = "\"\\/bfnrt"; *e != 0; ++e) {
      if (fits(automaton.next(f.b, short_escape(static_cast<uint8_t>(*e))), f.a + 1)) {
        f.state = kEscape;
        return true;
      }
    }
    return false;
  }
  const int32_t next = automaton.next(f.b, c);
  const bool starts_character = c < 0x80 || c >= 0xC0;
  if (!fits(next, f.a + (starts_character ? 1 : 0))) return false;
  f.b = next;
  if (starts_character) ++f.a;
  return true;
}

bool JsonMatcher::bounded(const Frame& f) const {
  const GrammarNode& n = grammar_->nodes[f.node];
  return n.kind == Kind::kInteger && (n.has_minimum || n.has_maximum || n.multiple_of > 0);
}

bool JsonMatcher::number_whole(const Frame& f) const {
  if (!number_complete(f.state)) return false;
  const GrammarNode& n = grammar_->nodes[f.node];
  if (n.kind == Kind::kNumber && n.number_bounds.any()) return n.number_bounds.contains(f.pending != 0, f.alive, f.low);
  if (!bounded(f)) return true;
  return magnitude_taken(n, magnitude_range(n, f.pending != 0), f.alive);
}

bool JsonMatcher::ends_complete(std::vector<Frame>::const_iterator begin,
                                std::vector<Frame>::const_iterator end) const {
  for (auto it = end; it != begin; --it) {
    const Frame& f = *(it - 1);
    if (f.kind == FrameKind::kNumber && number_whole(f)) continue;
    if (f.kind == FrameKind::kRegex && pattern_of(f).accepting(f.b)) continue;
    if (f.kind == FrameKind::kValue && grammar_->nodes[f.node].kind == Kind::kRegex) {
      const RegexAutomaton& automaton = pattern_of(f);
      if (automaton.accepting(automaton.start())) continue;  // a pattern that the empty text matches
    }
    if (f.kind == FrameKind::kLiterals) {
      bool complete = false;
      const auto& literals = grammar_->nodes[f.node].literals;
      for_each_bit(f.alive, [&](int i) { complete |= literals[i].size() == static_cast<size_t>(f.a); });
      if (complete) continue;
    }
    return false;
  }
  return true;
}

bool JsonMatcher::can_end() const {
  uint32_t begin = 0;
  for (uint32_t end : ends_) {
    if (ends_complete(frames_.begin() + begin, frames_.begin() + end)) return true;
    begin = end;
  }
  return false;
}

bool JsonMatcher::done() const {
  uint32_t begin = 0;
  for (uint32_t end : ends_) {
    if (end != begin) return false;
    begin = end;
  }
  return !ends_.empty();
}

bool JsonMatcher::in_plain_string() const {
  bool any_plain = false;
  std::vector<PatternState> patterns;
  return in_string(any_plain, patterns) && patterns.empty();
}

bool JsonMatcher::in_string(bool& any_plain, std::vector<PatternState>& patterns) const {
  any_plain = false;
  patterns.clear();
  uint32_t begin = 0;
  for (uint32_t end : ends_) {
    if (end == begin) return false;
    const Frame& top = frames_[end - 1];
    if (top.kind != FrameKind::kString || top.state != kChars) return false;
    const GrammarNode& n = grammar_->nodes[top.node];
    if (n.pattern >= 0) {
      const PatternState p{&pattern_of(top), top.b, n.counted_max_length < 0 ? -1 : n.counted_max_length - top.a};
      if (std::find(patterns.begin(), patterns.end(), p) == patterns.end()) patterns.push_back(p);
    } else if (n.max_length < 0) {
      any_plain = true;
    } else {
      return false;
    }
    begin = end;
  }
  return !ends_.empty();
}

}  // namespace tessera::text
