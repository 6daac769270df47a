// GrammarVocabulary: a tokenizer's tokens as the bytes each appends to a
// text, sorted, so that the tokens a JsonMatcher takes next are found by one
// walk over the shared prefixes (a dead prefix skips every token under it).
// JsonTokenMatcher: one output's matcher over those tokens.
//
// Written here because no packaged library does it: the engines that
// constrain decoding to a grammar (xgrammar, llguidance, outlines-core) are
// not in Debian.
//
// Inside a string with no length bound, the matcher's answer for a token of
// plain string bytes (no quote, backslash or control byte; whole UTF-8
// characters) is always yes, so those tokens come from a precomputed mask and
// only the rest of the vocabulary is walked. Inside a string with a pattern,
// a plain token fits when the pattern's automaton takes its bytes, so the
// plain tokens are walked through the automaton alone (a table lookup a
// byte) and only the rest through the matcher.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "text/json_grammar.h"
#include "text/json_matcher.h"
#include "text/tokenizer.h"

namespace tessera::text {

// The bytes each id of `tokenizer` appends to a text that has tokens before
// it (SentencePiece's word-start mark as a space, byte pieces as their byte,
// byte-level pieces as their raw bytes); empty for special tokens and ids
// with no piece.
std::vector<std::string> token_bytes(const Tokenizer& tokenizer);

// The plain-token masks of pattern states a constrained request has reached
// (a pattern's automaton revisits few states, and a state's mask depends on
// nothing else), kMaxBytes of them at most. Shared by the matchers of one
// request's choices, whose grammar owns the automata it is keyed by; safe
// from many threads.
class PatternMaskCache {
 public:
  static constexpr size_t kMaxBytes = size_t{2} << 20;
  // ORs the mask of `state` into `allowed`, made by make(mask) on first use.
  template <typename Make>
  void add(const JsonMatcher::PatternState& state, std::span<uint64_t> allowed, Make make) {
    const std::vector<uint64_t>* mask = find(state);
    std::vector<uint64_t> made;
    if (mask == nullptr) {
      made.assign(allowed.size(), 0);
      make(std::span<uint64_t>(made));
      mask = &made;
      keep(state, made);
    }
    for (size_t w = 0; w < std::min(mask->size(), allowed.size()); ++w) allowed[w] |= (*mask)[w];
  }

 private:
  const std::vector<uint64_t>* find(const JsonMatcher::PatternState& state);
  void keep(const JsonMatcher::PatternState& state, const std::vector<uint64_t>& mask);

  std::mutex mutex_;
  // By automaton, state and characters left (-1: any number); entries never change.
  std::map<std::tuple<const RegexAutomaton*, int32_t, int64_t>, std::vector<uint64_t>> masks_;
};

class GrammarVocabulary {
 public:
  explicit GrammarVocabulary(std::vector<std::string> token_bytes);
  explicit GrammarVocabulary(const Tokenizer& tokenizer) : GrammarVocabulary(token_bytes(tokenizer)) {}
  GrammarVocabulary(const GrammarVocabulary&) = delete;  // the sorted views point into bytes_
  GrammarVocabulary& operator=(const GrammarVocabulary&) = delete;

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  // The bytes of `id` (empty: the id is never allowed).
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  // Sets bit id (word id / 64, bit id % 64) of `allowed` for every token whose
  // bytes `matcher` takes; other bits are left as they are, and ids past
  // `allowed` (a tokenizer larger than the model's vocabulary) are left out.
  // Safe from many threads at once. `cache`, when given, keeps the masks
  // of pattern states.
  void allowed(const JsonMatcher& matcher, std::span<uint64_t> allowed, PatternMaskCache* cache = nullptr) const;

 private:
  struct Entry {
    std::string_view bytes;  // into bytes_
    int32_t id;
  };
  // Marks every token of `sorted` whose bytes `root` takes, advancing a
  // state by a byte with advance(next, from, byte) -> bool (false: refused).
  template <typename State, typename Advance>
  static void search(const State& root, const std::vector<Entry>& sorted, std::span<uint64_t> allowed,
                     Advance advance);

  std::vector<std::string> bytes_;  // [size] by id
  std::vector<Entry> all_;          // every non-empty token, sorted by bytes
  std::vector<Entry> not_plain_;    // the tokens that are not plain string bytes, sorted
  std::vector<Entry> plain_sorted_; // the plain string tokens, sorted
  std::vector<uint64_t> plain_;     // [ceil(size / 64)] the plain string tokens
  int64_t most_plain_chars_ = 0;    // the most characters (code points) of a plain token
};

// A token the vocabulary leaves out (a special token) that a grammar's
// markup writes, with its text: <|action_start|> of a forced tool call.
struct GrammarToken {
  int32_t id = 0;
  std::string bytes;
};

// One output's position in a JsonGrammar, token by token.
class JsonTokenMatcher {
 public:
  // `pattern_masks`: shared by the matchers of one grammar (a request's
  // choices); a cache of its own when null.
  JsonTokenMatcher(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const GrammarVocabulary> vocabulary,
                   std::vector<GrammarToken> extra = {}, std::shared_ptr<PatternMaskCache> pattern_masks = nullptr)
      : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), extra_(std::move(extra)),
        matcher_(*grammar_),
        pattern_masks_(pattern_masks ? std::move(pattern_masks) : std::make_shared<PatternMaskCache>()) {}

  // The vocabulary's tokens and the extra ones that fit; `allowed` as in GrammarVocabulary::allowed.
  void allowed(std::span<uint64_t> allowed) const;
  // Takes token `id`; false (nothing changes) when its bytes do not fit.
  bool accept(int32_t id);
  bool can_end() const { return matcher_.can_end(); }
  bool done() const { return matcher_.done(); }

 private:
  std::shared_ptr<const JsonGrammar> grammar_;
  std::shared_ptr<const GrammarVocabulary> vocabulary_;
  std::vector<GrammarToken> extra_;
  JsonMatcher matcher_;
  std::shared_ptr<PatternMaskCache> pattern_masks_;
};

}  // namespace tessera::text
