#include "text/added_vocabulary.h"

#include <algorithm>

#include "text/utf8.h"

namespace tessera::text {
namespace {

// Rust's char::is_whitespace, which HF uses for lstrip/rstrip.
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Decodes the code point starting at `pos` of valid UTF-8 text.
char32_t code_point_at(std::string_view text, size_t pos, size_t length) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  if (length == 1) return byte(0);
  char32_t value = byte(0) & (0xFF >> (length + 1));
  for (size_t i = 1; i < length; ++i) value = (value << 6) | (byte(i) & 0x3F);
  return value;
}

// Start of the code point that ends just before `end`.
size_t previous_char(std::string_view text, size_t end) {
  size_t pos = end - 1;
  while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}

char32_t char_before(std::string_view text, size_t end) {
  const size_t pos = previous_char(text, end);
  return code_point_at(text, pos, end - pos);
}

char32_t char_at(std::string_view text, size_t pos) {
  const size_t length = std::max<size_t>(1, utf8_sequence_length(text, pos));
  return code_point_at(text, pos, length);
}

// An approximation of Rust's char::is_alphanumeric for single_word: ASCII
// letters and digits, and every non-ASCII character that is not whitespace.
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return !is_whitespace(c);
}

}  // namespace

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    by_id_.emplace(token.id, i);
    by_content_.emplace(token.content, i);
    if (token.content.empty()) continue;  // an empty token can never match
    Index& index = token.normalized ? normalized_index_ : raw_index_;
    index[static_cast<unsigned char>(token.content[0])].push_back(i);
  }
  for (Index* index : {&raw_index_, &normalized_index_}) {
    for (auto& [byte, list] : *index) {
      std::stable_sort(list.begin(), list.end(),
                       [&](size_t a, size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
    }
  }
}

const AddedToken* AddedVocabulary::longest_match(const Index& index, std::string_view text, size_t pos) const {
  const auto it = index.find(static_cast<unsigned char>(text[pos]));
  if (it == index.end()) return nullptr;
  for (const size_t i : it->second) {
    if (text.substr(pos).starts_with(tokens_[i].content)) return &tokens_[i];
  }
  return nullptr;
}

void AddedVocabulary::split(std::string_view text, bool normalized_tokens, std::vector<TextSpan>& out) const {
  const Index& index = normalized_tokens ? normalized_index_ : raw_index_;
  const auto emit_text = [&](size_t begin, size_t end) {
    if (end > begin) out.push_back({text.substr(begin, end - begin), begin, std::nullopt});
  };
  size_t emitted = 0;  // everything before this offset is in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* token = index.empty() ? nullptr : longest_match(index, text, pos);
    if (token == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + token->content.size();
    pos = stop;  // a refused single_word match resumes after itself, as HF's matcher does
    if (token->single_word) {
      const bool space_before = start == 0 || !is_word_char(char_before(text, start));
      const bool space_after = stop == text.size() || !is_word_char(char_at(text, stop));
      if (!space_before || !space_after) continue;
    }
    if (token->lstrip) {
      while (start > emitted && is_whitespace(char_before(text, start))) start = previous_char(text, start);
    }
    if (token->rstrip) {
      while (stop < text.size() && is_whitespace(char_at(text, stop)))
        stop += std::max<size_t>(1, utf8_sequence_length(text, stop));
    }
    emit_text(emitted, start);
    out.push_back({text.substr(start, stop - start), start, token->id});
    emitted = stop;
    pos = std::max(pos, stop);
  }
  emit_text(emitted, text.size());
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace tessera::text
