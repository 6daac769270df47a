// RegexAutomaton: a regular expression (regex_syntax.h) as a deterministic
// automaton over UTF-8 bytes, for structured output: JSON Schema's `pattern`
// and `format` inside a string, vLLM's guided_regex as the whole answer.
//
// Every state it keeps can still reach a match, so a byte it takes never
// leads into a dead end, in the middle of a character neither (a character
// class is compiled into the UTF-8 byte sequences of its code points). That
// is what lets JsonMatcher offer a token only when the text can still be
// finished.
//
// Built by Thompson's construction and the subset construction, with bytes
// grouped into classes that no transition tells apart. Written here because
// the regex libraries tessera links (PCRE2) match whole texts and do not
// expose an automaton to step byte by byte. Sizes are bounded: a pattern
// whose automaton would pass kMaxStates states is refused.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "text/regex_syntax.h"

namespace tessera::text {

struct RegexOptions {
  RegexDialect dialect = RegexDialect::kEcmaScript;
  // JSON Schema's `pattern` matches anywhere in the string unless `^` / `$`
  // anchor it; guided_regex must match the whole text (`^` and `$` at its
  // ends change nothing).
  bool search = false;
  // Only characters a JSON string writes (no control characters but \b, \t,
  // \n, \f, \r, which have short escapes): what JsonMatcher can emit there.
  bool json_string = false;
  // A pattern whose automaton would pass this many states, or take more
  // than max_work steps to build (closure states visited, about 30 ms a
  // million), is refused; a grammar passes what is left of its budget for
  // all its patterns.
  size_t max_states = 10000;
  uint64_t max_work = 4000000;
};

class RegexAutomaton {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr size_t kMaxStates = RegexOptions{}.max_states;
  static constexpr size_t kMaxNfaStates = 200000;
  static constexpr uint64_t kMaxWork = RegexOptions{}.max_work;

  // Throws Error(kInvalidArgument) for a pattern that is malformed, not
  // supported, too large, or that no string (no string a JSON string can
  // hold, with json_string) matches.
  static std::shared_ptr<const RegexAutomaton> compile(std::string_view pattern, const RegexOptions& options);

  int32_t start() const { return 0; }
  // The state after `byte`, or kDead.
  int32_t next(int32_t state, uint8_t byte) const {
    return table_[static_cast<size_t>(state) * classes_ + class_of_[byte]];
  }
  // The text so far matches.
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  // Some byte may follow.
  bool extendable(int32_t state) const { return extendable_[static_cast<size_t>(state)] != 0; }
  // The fewest characters (code points) after which the text from `state`
  // matches: 0 where it matches already. Every state has one (none is kept
  // that reaches no match). A byte that continues a character counts none.
  int32_t chars_to_accept(int32_t state) const { return chars_to_accept_[static_cast<size_t>(state)]; }
  int32_t most_chars_to_accept() const { return most_chars_to_accept_; }  // over all states
  // This automaton with matches of `min_length` to `max_length` (-1: no
  // bound) code points only: JSON Schema's minLength and maxLength beside a
  // pattern. Throws Error(kInvalidArgument) when no match has such a length
  // or the product passes `max_states`.
  std::shared_ptr<const RegexAutomaton> with_length(int64_t min_length, int64_t max_length,
                                                    size_t max_states = kMaxStates) const;
  size_t states() const { return accepting_.size(); }
  uint64_t build_work() const { return build_work_; }  // the construction's steps (RegexOptions::max_work)
  size_t byte_classes() const { return classes_; }

 private:
  RegexAutomaton() = default;
  friend class RegexAutomatonBuilder;
  // The automaton of `table` ([states][classes]) and `accepting` without the
  // states that reach no match (state 0, the start, must reach one).
  static std::shared_ptr<RegexAutomaton> pruned(const std::array<uint8_t, 256>& class_of, size_t classes,
                                                      const std::vector<int32_t>& table,
                                                      const std::vector<uint8_t>& accepting);
  // chars_to_accept_ from the table: a backward search from the accepting
  // states in which a continuation byte's edge costs 0 and any other 1.
  void set_chars_to_accept();

  std::array<uint8_t, 256> class_of_{};
  size_t classes_ = 1;
  std::vector<int32_t> table_;      // [states][classes] the next state, kDead
  std::vector<uint8_t> accepting_;  // [states]
  std::vector<uint8_t> extendable_; // [states]
  std::vector<int32_t> chars_to_accept_;  // [states]
  int32_t most_chars_to_accept_ = 0;
  uint64_t build_work_ = 0;
};

}  // namespace tessera::text
