#include "text/grammar_vocabulary.h"

#include <algorithm>

#include "core/error.h"
#include "text/byte_level.h"
#include "text/decoder.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

// A token to decode in front of each other one, so that a tokenizer that
// treats the first token of a text differently (SentencePiece drops its
// leading space) shows what the token adds in the middle of a text.
int32_t anchor_id(const Tokenizer& tokenizer) {
  for (const char* piece : {"a", "\xE2\x96\x81" "a", "\xC4\xA0" "a"}) {
    if (const std::optional<int32_t> id = tokenizer.piece_to_id(piece)) return *id;
  }
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id) && !tokenizer.decode({id}, false).empty()) return id;
  }
  throw Error(ErrorKind::kInvalidArgument, "the tokenizer has no token with text: structured output cannot be served");
}

// Plain string bytes: what a JSON string takes anywhere, unescaped.
bool plain_string_bytes(std::string_view bytes) {
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == '"' || u == '\\') return false;
  }
  return !bytes.empty() && is_valid_utf8(bytes);
}

}  // namespace

std::vector<std::string> token_bytes(const Tokenizer& tokenizer) {
  const int32_t anchor = anchor_id(tokenizer);
  const std::string base = tokenizer.decode({anchor}, false);
  std::vector<std::string> out(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.is_special(id)) continue;
    std::string piece;
    try {
      piece = tokenizer.id_to_piece(id);
    } catch (const Error&) {
      continue;  // an id with no piece
    }
    if (const std::optional<unsigned char> byte = parse_byte_piece(piece)) {
      out[id] = std::string(1, static_cast<char>(*byte));
      continue;
    }
    std::string text = tokenizer.decode({anchor, id}, false);
    std::string added = text.starts_with(base) ? text.substr(base.size()) : tokenizer.decode({id}, false);
    // A byte-level piece of part of a character decodes to U+FFFD alone; its raw bytes are what it adds.
    if (added.find(kReplacementCharacter) != std::string::npos) {
      if (std::optional<std::string> raw = from_byte_level(piece)) added = std::move(*raw);
    }
    out[id] = std::move(added);
  }
  return out;
}

GrammarVocabulary::GrammarVocabulary(std::vector<std::string> token_bytes)
    : bytes_(std::move(token_bytes)), plain_((bytes_.size() + 63) / 64, 0) {
  for (size_t id = 0; id < bytes_.size(); ++id) {
    const std::string& b = bytes_[id];
    if (b.empty()) continue;
    const Entry entry{b, static_cast<int32_t>(id)};
    all_.push_back(entry);
    if (plain_string_bytes(b)) {
      plain_[id / 64] |= uint64_t{1} << (id % 64);
      plain_sorted_.push_back(entry);
      const auto chars = std::count_if(b.begin(), b.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; });
      most_plain_chars_ = std::max<int64_t>(most_plain_chars_, chars);
    } else {
      not_plain_.push_back(entry);
    }
  }
  const auto by_bytes = [](const Entry& x, const Entry& y) { return x.bytes < y.bytes; };
  std::sort(all_.begin(), all_.end(), by_bytes);
  std::sort(not_plain_.begin(), not_plain_.end(), by_bytes);
  std::sort(plain_sorted_.begin(), plain_sorted_.end(), by_bytes);
}

const std::vector<uint64_t>* PatternMaskCache::find(const JsonMatcher::PatternState& state) {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = masks_.find({state.automaton, state.state, state.remaining});
  return it == masks_.end() ? nullptr : &it->second;  // map nodes stay put; entries are never erased
}

void PatternMaskCache::keep(const JsonMatcher::PatternState& state, const std::vector<uint64_t>& mask) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if ((masks_.size() + 1) * mask.size() * sizeof(uint64_t) <= kMaxBytes) {
    masks_.try_emplace({state.automaton, state.state, state.remaining}, mask);
  }
}

void GrammarVocabulary::allowed(const JsonMatcher& matcher, std::span<uint64_t> allowed,
                                PatternMaskCache* cache) const {
  const auto matcher_step = [](JsonMatcher& next, const JsonMatcher& from, uint8_t byte) {
    return next.assign_advanced(from, byte);
  };
  bool any_plain = false;
  std::vector<JsonMatcher::PatternState> patterns;
  if (!matcher.in_string(any_plain, patterns)) {
    search(matcher, all_, allowed, matcher_step);
    return;
  }
  if (any_plain) {
    for (size_t w = 0; w < std::min(plain_.size(), allowed.size()); ++w) allowed[w] |= plain_[w];
  } else {
    for (JsonMatcher::PatternState p : patterns) {
      // Far from a counted maximum, every plain token that the automaton
      // takes leaves room for the fewest characters a match still needs: the
      // state's mask is the same for every count, and kept as for none.
      if (p.remaining >= most_plain_chars_ + p.automaton->most_chars_to_accept()) p.remaining = -1;
      const auto walk = [&](std::span<uint64_t> mask) {
        if (p.remaining < 0) {
          search(p.state, plain_sorted_, mask, [&](int32_t& next, int32_t from, uint8_t byte) {
            next = p.automaton->next(from, byte);
            return next != RegexAutomaton::kDead;
          });
          return;
        }
        // Near it: each token's characters counted, as JsonMatcher counts them.
        struct Counted {
          int32_t state = 0;
          int64_t chars = 0;
        };
        search(Counted{p.state, 0}, plain_sorted_, mask, [&](Counted& next, const Counted& from, uint8_t byte) {
          next.state = p.automaton->next(from.state, byte);
          next.chars = from.chars + ((byte & 0xC0) != 0x80 ? 1 : 0);
          return next.state != RegexAutomaton::kDead &&
                 next.chars + p.automaton->chars_to_accept(next.state) <= p.remaining;
        });
      };
      if (cache != nullptr) cache->add(p, allowed, walk);
      else walk(allowed);
    }
  }
  search(matcher, not_plain_, allowed, matcher_step);
}

template <typename State, typename Advance>
void GrammarVocabulary::search(const State& root, const std::vector<Entry>& sorted, std::span<uint64_t> allowed,
                               Advance advance) {
  // states[d]: root advanced by the current token's first d bytes; states
  // [0, valid] hold the previous token's prefixes, which the next token
  // shares up to their common length.
  std::vector<State> states(1, root);
  std::string_view previous;
  size_t valid = 0;
  size_t i = 0;
  while (i < sorted.size()) {
    const std::string_view token = sorted[i].bytes;
    size_t depth = 0;
    const size_t shared = std::min({valid, previous.size(), token.size()});
    while (depth < shared && previous[depth] == token[depth]) ++depth;
    bool dead = false;
    for (; depth < token.size(); ++depth) {
      if (states.size() <= depth + 1) states.push_back(root);
      if (!advance(states[depth + 1], states[depth], static_cast<uint8_t>(token[depth]))) {
        dead = true;
        break;
      }
    }
    previous = token;
    valid = depth;
    if (!dead) {
      const auto id = static_cast<size_t>(sorted[i].id);
      if (id / 64 < allowed.size()) allowed[id / 64] |= uint64_t{1} << (id % 64);
      ++i;
      continue;
    }
    // Every token that starts with the dead prefix is dead too; they follow this one.
    const std::string_view prefix = token.substr(0, depth + 1);
    i = static_cast<size_t>(std::partition_point(sorted.begin() + static_cast<std::ptrdiff_t>(i), sorted.end(),
                                                 [&](const Entry& e) { return e.bytes.starts_with(prefix); }) -
                            sorted.begin());
  }
}

void JsonTokenMatcher::allowed(std::span<uint64_t> allowed) const {
  vocabulary_->allowed(matcher_, allowed, pattern_masks_.get());
  for (const GrammarToken& token : extra_) {
    const auto id = static_cast<size_t>(token.id);
    if (id / 64 >= allowed.size()) continue;
    JsonMatcher after = matcher_;
    if (after.advance(token.bytes)) allowed[id / 64] |= uint64_t{1} << (id % 64);
  }
}

bool JsonTokenMatcher::accept(int32_t id) {
  for (const GrammarToken& token : extra_) {
    if (token.id == id) return matcher_.advance(token.bytes);
  }
  if (id < 0 || id >= vocabulary_->size()) return false;
  const std::string& bytes = vocabulary_->bytes(id);
  return !bytes.empty() && matcher_.advance(bytes);
}

}  // namespace tessera::text
