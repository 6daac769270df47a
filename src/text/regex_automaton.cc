#include "text/regex_automaton.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <utility>

#include "core/error.h"

namespace tessera::text {
namespace {

using Kind = RegexNode::Kind;
using Ranges = std::vector<CodePointRange>;

struct ByteRange {
  uint8_t first = 0, last = 0;
};
// One UTF-8 length's worth of code points as a byte range per position.
struct ByteSequence {
  ByteRange bytes[4];
  int length = 0;
};

int encode(char32_t c, uint8_t out[4]) {
  if (c < 0x80) {
    out[0] = static_cast<uint8_t>(c);
    return 1;
  }
  if (c < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  return 4;
}

// Splits [first, last] (no surrogates) into ranges whose UTF-8 encodings are
// each a byte range per position: first the encoded lengths apart, then
// until the two ends differ only in bytes that span their whole range.
void utf8_sequences(char32_t first, char32_t last, std::vector<ByteSequence>& out) {
  if (first > last) return;
  for (char32_t boundary : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}}) {
    if (first <= boundary && boundary < last) {
      utf8_sequences(first, boundary, out);
      utf8_sequences(boundary + 1, last, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const char32_t low_bits = (char32_t{1} << (6 * i)) - 1;
    if ((first & ~low_bits) == (last & ~low_bits)) continue;
    if ((first & low_bits) != 0) {
      utf8_sequences(first, first | low_bits, out);
      utf8_sequences((first | low_bits) + 1, last, out);
      return;
    }
    if ((last & low_bits) != low_bits) {
      utf8_sequences(first, (last & ~low_bits) - 1, out);
      utf8_sequences(last & ~low_bits, last, out);
      return;
    }
  }
  uint8_t a[4], b[4];
  ByteSequence sequence;
  sequence.length = encode(first, a);
  encode(last, b);
  for (int k = 0; k < sequence.length; ++k) sequence.bytes[k] = {a[k], b[k]};
  out.push_back(sequence);
}

// Thompson's automaton over bytes: each state has either epsilon moves or
// one byte-range move.
class Nfa {
 public:
  struct State {
    std::vector<int32_t> epsilon;
    int32_t next = -1;  // >= 0: the byte move's target
    ByteRange range;
  };
  struct Fragment {
    int32_t start, end;  // `end` has no moves yet
  };

  int32_t add() {
    if (states.size() >= RegexAutomaton::kMaxNfaStates) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("the pattern is too large to enforce (its automaton passes {} states): use smaller "
                              "repetition counts",
                              RegexAutomaton::kMaxNfaStates));
    }
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }
  void link(int32_t from, int32_t to) { states[static_cast<size_t>(from)].epsilon.push_back(to); }

  Fragment build(const RegexNode& node) {
    switch (node.kind) {
      case Kind::kEmpty: {
        const int32_t s = add();
        return {s, s};
      }
      case Kind::kChars: return characters(node.ranges);
      case Kind::kConcat: {
        Fragment whole = build(node.children[0]);
        for (size_t i = 1; i < node.children.size(); ++i) {
          const Fragment part = build(node.children[i]);
          link(whole.end, part.start);
          whole.end = part.end;
        }
        return whole;
      }
      case Kind::kAlternation: {
        const int32_t s = add(), e = add();
        for (const RegexNode& child : node.children) {
          const Fragment option = build(child);
          link(s, option.start);
          link(option.end, e);
        }
        return {s, e};
      }
      case Kind::kRepeat: return repeat(node);
      case Kind::kStart:
      case Kind::kEnd: break;
    }
    throw Error(ErrorKind::kInternal, "regex anchors reached the automaton");
  }

  std::vector<State> states;

 private:
  Fragment characters(const Ranges& ranges) {
    const int32_t s = add(), e = add();
    std::vector<ByteSequence> sequences;
    for (const CodePointRange& r : ranges) utf8_sequences(r.first, r.last, sequences);
    for (const ByteSequence& sequence : sequences) {
      int32_t from = s;
      for (int k = 0; k < sequence.length; ++k) {
        const int32_t move = add();
        link(from, move);
        const int32_t to = k + 1 == sequence.length ? e : add();
        states[static_cast<size_t>(move)].next = to;
        states[static_cast<size_t>(move)].range = sequence.bytes[k];
        from = to;
      }
    }
    return {s, e};
  }

  Fragment repeat(const RegexNode& node) {
    const RegexNode& child = node.children[0];
    const int32_t s = add();
    int32_t end = s;
    for (int32_t i = 0; i < node.min; ++i) {
      const Fragment copy = build(child);
      link(end, copy.start);
      end = copy.end;
    }
    if (node.max < 0) {  // a loop: any number more
      const int32_t loop = add(), out = add();
      link(end, loop);
      const Fragment copy = build(child);
      link(loop, copy.start);
      link(loop, out);
      link(copy.end, loop);
      return {s, out};
    }
    const int32_t out = add();
    for (int32_t i = node.min; i < node.max; ++i) {  // each optional copy may end the repetition
      const Fragment copy = build(child);
      link(end, copy.start);
      link(end, out);
      end = copy.end;
    }
    link(end, out);
    return {s, out};
  }
};

bool has_anchor(const RegexNode& node) {
  if (node.kind == Kind::kStart || node.kind == Kind::kEnd) return true;
  for (const RegexNode& child : node.children) {
    if (has_anchor(child)) return true;
  }
  return false;
}

void keep_only(RegexNode& node, const Ranges& allowed) {
  if (node.kind == Kind::kChars) node.ranges = intersect_ranges(node.ranges, allowed);
  for (RegexNode& child : node.children) keep_only(child, allowed);
}

RegexNode any_repeated(const Ranges& any) {
  RegexNode chars;
  chars.kind = Kind::kChars;
  chars.ranges = any;
  RegexNode repeat;
  repeat.kind = Kind::kRepeat;
  repeat.min = 0;
  repeat.max = -1;
  repeat.children.push_back(std::move(chars));
  return repeat;
}

// The pattern with its anchors taken off each top-level alternative's ends
// (with `search`, an unanchored end takes any characters there).
RegexNode without_anchors(RegexNode root, bool search, const Ranges& any) {
  std::vector<RegexNode> options;
  if (root.kind == Kind::kAlternation) options = std::move(root.children);
  else options.push_back(std::move(root));
  RegexNode out;
  out.kind = Kind::kAlternation;
  for (RegexNode& option : options) {
    std::vector<RegexNode> parts;
    if (option.kind == Kind::kConcat) parts = std::move(option.children);
    else parts.push_back(std::move(option));
    bool anchored_start = false, anchored_end = false;
    while (!parts.empty() && parts.front().kind == Kind::kStart) {
      parts.erase(parts.begin());
      anchored_start = true;
    }
    while (!parts.empty() && parts.back().kind == Kind::kEnd) {
      parts.pop_back();
      anchored_end = true;
    }
    for (const RegexNode& part : parts) {
      if (has_anchor(part)) {
        throw Error(ErrorKind::kInvalidArgument,
                    "'^' and '$' are supported only at the start and end of the pattern (or of its top-level "
                    "alternatives)");
      }
    }
    if (search && !anchored_start) parts.insert(parts.begin(), any_repeated(any));
    if (search && !anchored_end) parts.push_back(any_repeated(any));
    RegexNode concat;
    concat.kind = Kind::kConcat;
    if (parts.empty()) concat.kind = Kind::kEmpty;
    concat.children = std::move(parts);
    out.children.push_back(std::move(concat));
  }
  return out;
}

}  // namespace

class RegexAutomatonBuilder {
 public:
  RegexAutomatonBuilder(const Nfa& nfa, int32_t start, int32_t accept, size_t max_states, uint64_t max_work)
      : nfa_(nfa), accept_(accept), max_states_(max_states), max_work_(max_work), mark_(nfa.states.size(), 0) {
    set_byte_classes();
    id_of(closure({start}));
  }

  std::shared_ptr<const RegexAutomaton> build() {
    std::vector<int32_t> targets;
    for (size_t d = 0; d < sets_.size(); ++d) {
      for (size_t k = 0; k < classes_; ++k) {
        const uint8_t byte = representative_[k];
        targets.clear();
        for (int32_t s : sets_[d]) {
          const Nfa::State& state = nfa_.states[static_cast<size_t>(s)];
          if (state.next >= 0 && state.range.first <= byte && byte <= state.range.last) targets.push_back(state.next);
        }
        int32_t to = RegexAutomaton::kDead;
        if (!targets.empty()) {
          std::vector<int32_t> set = closure(targets);
          to = id_of(set);  // may grow sets_
        }
        table_.push_back(to);
      }
    }
    std::vector<uint8_t> accepting;
    for (const std::vector<int32_t>& set : sets_) {
      accepting.push_back(std::binary_search(set.begin(), set.end(), accept_) ? 1 : 0);
    }
    std::shared_ptr<RegexAutomaton> out = RegexAutomaton::pruned(class_of_, classes_, table_, accepting);
    out->build_work_ = work_;
    return out;
  }

 private:
  void set_byte_classes() {
    std::array<bool, 257> starts{};
    starts[0] = true;
    for (const Nfa::State& s : nfa_.states) {
      if (s.next < 0) continue;
      starts[s.range.first] = true;
      starts[static_cast<size_t>(s.range.last) + 1] = true;
    }
    int k = -1;
    for (int b = 0; b < 256; ++b) {
      if (starts[static_cast<size_t>(b)]) {
        ++k;
        representative_.push_back(static_cast<uint8_t>(b));
      }
      class_of_[static_cast<size_t>(b)] = static_cast<uint8_t>(k);
    }
    classes_ = representative_.size();
  }

  // The byte-move states and the accepting state reachable by epsilon moves, sorted.
  std::vector<int32_t> closure(const std::vector<int32_t>& from) {
    ++stamp_;
    std::vector<int32_t> stack = from, out;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (mark_[static_cast<size_t>(s)] == stamp_) continue;
      mark_[static_cast<size_t>(s)] = stamp_;
      // The construction's time is its closures' states: bounded, so that no
      // pattern holds a request's thread for long.
      if (++work_ > max_work_) {
        throw Error(ErrorKind::kInvalidArgument,
                    "the pattern is too complex to enforce (building its automaton takes too long)");
      }
      const Nfa::State& state = nfa_.states[static_cast<size_t>(s)];
      if (state.next >= 0 || s == accept_) out.push_back(s);
      for (int32_t t : state.epsilon) stack.push_back(t);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  int32_t id_of(const std::vector<int32_t>& set) {
    const auto [it, added] = ids_.try_emplace(set, static_cast<int32_t>(sets_.size()));
    if (added) {
      if (sets_.size() >= max_states_) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("the pattern is too complex to enforce (its automaton passes {} states)",
                                max_states_));
      }
      sets_.push_back(set);
    }
    return it->second;
  }

  const Nfa& nfa_;
  int32_t accept_;
  size_t max_states_;
  uint64_t max_work_;
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  uint64_t work_ = 0;  // states visited by the closures so far
  std::array<uint8_t, 256> class_of_{};
  std::vector<uint8_t> representative_;
  size_t classes_ = 0;
  std::map<std::vector<int32_t>, int32_t> ids_;
  std::vector<std::vector<int32_t>> sets_;  // [states] the NFA states each stands for
  std::vector<int32_t> table_;              // [states][classes]
};

std::shared_ptr<RegexAutomaton> RegexAutomaton::pruned(const std::array<uint8_t, 256>& class_of,
                                                             size_t classes, const std::vector<int32_t>& table,
                                                             const std::vector<uint8_t>& accepting) {
  const size_t n = accepting.size();
  std::vector<std::vector<int32_t>> into(n);
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> queue;
  for (size_t d = 0; d < n; ++d) {
    for (size_t k = 0; k < classes; ++k) {
      const int32_t to = table[d * classes + k];
      if (to >= 0) into[static_cast<size_t>(to)].push_back(static_cast<int32_t>(d));
    }
    if (accepting[d]) {
      live[d] = 1;
      queue.push_back(static_cast<int32_t>(d));
    }
  }
  while (!queue.empty()) {
    const int32_t d = queue.back();
    queue.pop_back();
    for (int32_t from : into[static_cast<size_t>(d)]) {
      if (!live[static_cast<size_t>(from)]) {
        live[static_cast<size_t>(from)] = 1;
        queue.push_back(from);
      }
    }
  }
  if (n == 0 || !live[0]) throw Error(ErrorKind::kInvalidArgument, "no string matches the pattern");
  std::vector<int32_t> renumbered(n, kDead);
  int32_t count = 0;
  for (size_t d = 0; d < n; ++d) {
    if (live[d]) renumbered[d] = count++;
  }
  std::shared_ptr<RegexAutomaton> out(new RegexAutomaton());
  out->class_of_ = class_of;
  out->classes_ = classes;
  for (size_t d = 0; d < n; ++d) {
    if (!live[d]) continue;
    bool extendable = false;
    for (size_t k = 0; k < classes; ++k) {
      const int32_t to = table[d * classes + k];
      out->table_.push_back(to >= 0 ? renumbered[static_cast<size_t>(to)] : kDead);
      extendable |= out->table_.back() != kDead;
    }
    out->accepting_.push_back(accepting[d]);
    out->extendable_.push_back(extendable ? 1 : 0);
  }
  out->set_chars_to_accept();
  return out;
}

void RegexAutomaton::set_chars_to_accept() {
  const size_t n = accepting_.size();
  std::vector<uint8_t> cost(classes_, 1);  // per class: 0 where its bytes continue a character
  for (int b = 0x80; b < 0xC0; ++b) cost[class_of_[static_cast<size_t>(b)]] = 0;
  std::vector<std::vector<std::pair<int32_t, uint8_t>>> into(n);  // (from, cost)
  for (size_t d = 0; d < n; ++d) {
    for (size_t k = 0; k < classes_; ++k) {
      const int32_t to = table_[d * classes_ + k];
      if (to != kDead) into[static_cast<size_t>(to)].emplace_back(static_cast<int32_t>(d), cost[k]);
    }
  }
  constexpr int32_t kFar = std::numeric_limits<int32_t>::max();
  chars_to_accept_.assign(n, kFar);
  std::deque<int32_t> queue;
  for (size_t d = 0; d < n; ++d) {
    if (accepting_[d]) {
      chars_to_accept_[d] = 0;
      queue.push_back(static_cast<int32_t>(d));
    }
  }
  while (!queue.empty()) {
    const int32_t d = queue.front();
    queue.pop_front();
    const int32_t here = chars_to_accept_[static_cast<size_t>(d)];
    for (const auto& [from, c] : into[static_cast<size_t>(d)]) {
      int32_t& there = chars_to_accept_[static_cast<size_t>(from)];
      if (here + c >= there) continue;
      there = here + c;
      if (c == 0) queue.push_front(from);
      else queue.push_back(from);
    }
  }
  most_chars_to_accept_ = 0;
  for (int32_t d : chars_to_accept_) most_chars_to_accept_ = std::max(most_chars_to_accept_, d);
}

std::shared_ptr<const RegexAutomaton> RegexAutomaton::with_length(int64_t min_length, int64_t max_length,
                                                                  size_t max_states) const {
  // States (state, code points so far), the count kept up to max_length, or
  // up to min_length (then saturated) without a maximum.
  const int64_t cap = max_length >= 0 ? max_length : min_length;
  std::array<uint8_t, 256> continuation{};  // per class: its bytes continue a character
  for (int b = 0x80; b < 0xC0; ++b) continuation[class_of_[static_cast<size_t>(b)]] = 1;
  std::map<std::pair<int32_t, int64_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int64_t>> pairs;
  const auto id_of = [&](int32_t state, int64_t count) {
    const auto [it, added] = ids.try_emplace({state, count}, static_cast<int32_t>(pairs.size()));
    if (added) {
      if (pairs.size() >= max_states) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("the pattern with its length bounds is too complex to enforce (its automaton "
                                "passes {} states)",
                                max_states));
      }
      pairs.emplace_back(state, count);
    }
    return it->second;
  };
  id_of(start(), 0);
  std::vector<int32_t> table;
  std::vector<uint8_t> accepting;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [state, count] = pairs[i];
    accepting.push_back(this->accepting(state) && count >= min_length ? 1 : 0);
    for (size_t k = 0; k < classes_; ++k) {
      const int32_t to = table_[static_cast<size_t>(state) * classes_ + k];
      const int64_t next_count = continuation[k] ? count : count + 1;
      if (to == kDead || (max_length >= 0 && next_count > max_length)) {
        table.push_back(kDead);
        continue;
      }
      table.push_back(id_of(to, std::min(next_count, cap)));
    }
  }
  try {
    return pruned(class_of_, classes_, table, accepting);
  } catch (const Error&) {
    throw Error(ErrorKind::kInvalidArgument,
                max_length >= 0
                    ? fmt::format("no string of {} to {} characters matches the pattern", min_length, max_length)
                    : fmt::format("no string of at least {} characters matches the pattern", min_length));
  }
}

std::shared_ptr<const RegexAutomaton> RegexAutomaton::compile(std::string_view pattern,
                                                              const RegexOptions& options) {
  RegexNode root = parse_regex(pattern, options.dialect);
  // What a JSON string can carry: the short-escaped controls and from the space on.
  const Ranges json_characters = normalize_ranges({{'\b', '\t'}, {'\n', '\n'}, {'\f', '\r'}, {0x20, 0x10FFFF}});
  const Ranges any = options.json_string ? json_characters : complement_ranges({});
  root = without_anchors(std::move(root), options.search, any);
  if (options.json_string) keep_only(root, json_characters);
  Nfa nfa;
  const Nfa::Fragment whole = nfa.build(root);
  return RegexAutomatonBuilder(nfa, whole.start, whole.end, options.max_states, options.max_work).build();
}

}  // namespace tessera::text
