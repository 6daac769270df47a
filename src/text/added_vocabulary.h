// Added tokens of a Hugging Face tokenizer.json ("added_tokens"): strings such
// as <s>, </s> or <|im_start|> that are found in the text before any
// normalization or BPE and become their id directly.
//
// Matching follows HF's AddedVocabulary: leftmost-longest, non-overlapping;
// tokens with normalized = false are matched in the raw text, the others in
// the normalized text; lstrip/rstrip absorb neighbouring whitespace and
// single_word refuses matches inside a word.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;     // dropped by decode(skip_special = true)
  bool normalized = false;  // matched after normalization instead of before
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A span of text, or an added token's id with the span it covered.
struct TextSpan {
  std::string_view text;
  size_t offset = 0;  // of `text` within the string that was split
  std::optional<int32_t> id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  explicit AddedVocabulary(std::vector<AddedToken> tokens);

  // Splits `text` at the added tokens whose `normalized` flag equals
  // `normalized_tokens`. Spans without an id are left for the model; empty
  // spans are not emitted.
  void split(std::string_view text, bool normalized_tokens, std::vector<TextSpan>& out) const;

  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // For each first byte, the indices of the tokens starting with it, longest first.
  using Index = std::unordered_map<unsigned char, std::vector<size_t>>;
  const AddedToken* longest_match(const Index& index, std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  Index raw_index_;
  Index normalized_index_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
};

}  // namespace tessera::text
