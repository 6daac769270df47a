// JsonMatcher: reads a JsonGrammar's text byte by byte and says which bytes
// may come next, for constrained decoding (grammar_vocabulary.h turns that
// into the tokens that may come next).
//
// The state is a set of alternatives (an anyOf opens one per option, and
// those that a byte rules out are dropped), each a stack of frames: the
// values being written, innermost last. A byte is accepted when at least one
// alternative takes it. An empty stack is a complete value that nothing may
// follow. What the matcher writes is stricter than JSON in two ways that keep
// a model from rambling: a run of whitespace is at most the grammar's
// max_whitespace bytes (JsonGrammar::kMaxWhitespace unless it says fewer),
// and a number at most kMaxDigits digits. Strings must be valid UTF-8 with
// JSON's escapes; control bytes are refused.
//
// Copying is cheap (two flat vectors, whose capacity assignment reuses), so a
// search over a vocabulary keeps one matcher per depth.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "text/json_grammar.h"

namespace tessera::text {

class JsonMatcher {
 public:
  static constexpr int kMaxWhitespace = JsonGrammar::kMaxWhitespace;  // the default cap
  static constexpr int kMaxDigits = 24;
  static constexpr size_t kMaxAlternatives = JsonGrammar::kMaxAlternatives;  // stacks followed at once

  // `grammar` must outlive the matcher and its copies.
  explicit JsonMatcher(const JsonGrammar& grammar);

  // Takes `byte`; false (and the state unchanged) when no alternative can.
  bool advance(uint8_t byte);
  // All of `bytes`, or none of them (false).
  bool advance(std::string_view bytes);
  // *this = `from` advanced by `byte`; false when no alternative takes it
  // (*this is then unspecified). Reuses this matcher's memory.
  bool assign_advanced(const JsonMatcher& from, uint8_t byte);

  // The text so far is a whole value: the output may end here.
  bool can_end() const;
  // A whole value that no byte may extend: the output must end here.
  bool done() const;
  // Every alternative is inside a string with no length bound and no
  // pattern, between two characters: any token of plain string bytes (no '"', no '\\', no control
  // byte, whole UTF-8 characters) may come next, and changes nothing that
  // matters for the next token's choice but the bytes themselves.
  bool in_plain_string() const;
  // Where a string's pattern decides: every alternative is inside a string
  // between two characters, either with no length bound (`any_plain` set:
  // every plain token fits) or with a pattern, whose automaton and state are
  // appended to `patterns` (a plain token fits when one of them takes its
  // bytes). False, with the outputs unspecified, otherwise.
  struct PatternState {
    const RegexAutomaton* automaton;
    int32_t state;
    // Characters the string may still take (a counted maximum,
    // GrammarNode::counted_max_length), or -1 for any number.
    int64_t remaining = -1;
    bool operator==(const PatternState&) const = default;
  };
  bool in_string(bool& any_plain, std::vector<PatternState>& patterns) const;

  enum class FrameKind : uint8_t { kValue, kObject, kKey, kArray, kString, kNumber, kLiterals, kSequence, kRegex };
  struct Frame {
    FrameKind kind = FrameKind::kValue;
    uint8_t state = 0;
    uint8_t whitespace = 0;  // bytes of the current whitespace run
    uint8_t pending = 0;     // string: UTF-8 continuation bytes or \u hex digits still due; number: negative
    uint8_t low = 0, high = 0;  // string: the next continuation byte's range; see kChars, kHex
    int32_t node = 0;
    // object: the next property; array: items; string: code points; number:
    // digits; key, literals: bytes matched; sequence: the next part.
    int32_t a = 0;
    // object: the current key's value node; number: 1 for an integer;
    // string: the value of a \u escape being read, or with a pattern the
    // pattern's automaton state; regex: the automaton state.
    int32_t b = 0;
    // key, literals: the alternatives still matching; bounded integer: its
    // magnitude; array with distinct items: the values its items took.
    uint64_t alive = 0;
    bool operator==(const Frame&) const = default;
  };

 private:
  using Stack = std::vector<Frame>;
  // Feeds `byte` to `stack` (consumed), appending every stack that results.
  // `option_depth`: anyOf frames opened for this byte so far (a cycle of
  // $refs stops there).
  void feed(Stack& stack, uint8_t byte, std::vector<Frame>& frames, std::vector<uint32_t>& ends,
            int option_depth) const;
  void add_stack(const Stack& stack, std::vector<Frame>& frames, std::vector<uint32_t>& ends) const;
  // A property window of object frame `f`: bits of the properties that may come next.
  uint64_t key_window(const Frame& f) const;
  bool may_close_object(const Frame& f) const;
  // A string frame with a pattern: takes `c` (true) or not. Only the short
  // escapes are written there (\uXXXX is not): each stands for one byte the
  // automaton steps on.
  bool feed_pattern_string(Stack& s, uint8_t c) const;
  // An array of distinct items (GrammarNode::distinct_items): the values its
  // items took, which a new item (the top frame, its parent the array) may not
  // take again; 0 for any other parent. mark_taken: a literal item just
  // written, `s` its parent on top.
  uint64_t taken_by_array(const Stack& s) const;
  void mark_taken(Stack& s, uint64_t literal) const;
  // The automaton of a string or regex frame's node.
  const RegexAutomaton& pattern_of(const Frame& f) const {
    return *grammar_->patterns[static_cast<size_t>(grammar_->nodes[f.node].pattern)];
  }
  // An integer frame with bounds or a multipleOf; a number frame that may end
  // here (for such an integer: its value within the bounds, a multiple).
  bool bounded(const Frame& f) const;
  bool number_whole(const Frame& f) const;
  // Pops frames that a value can end in without another byte (a number, a
  // literal that is complete); true when that empties the stack.
  bool ends_complete(std::vector<Frame>::const_iterator begin, std::vector<Frame>::const_iterator end) const;

  const JsonGrammar* grammar_;
  std::vector<Frame> frames_;  // the alternatives' frames, one stack after another
  std::vector<uint32_t> ends_;  // [alternatives] where each stack ends in frames_
  Stack work_;                  // scratch
};

}  // namespace tessera::text
