// Regex: the patterns of tokenizer.json's Split pre-tokenizers (GPT-2, Llama 3,
// Qwen2: \p{L}, \p{N}, (?i:'s|'t|...), lookahead), compiled with PCRE2 in
// UTF and Unicode-property mode. Hugging Face evaluates them with Oniguruma;
// the constructs these patterns use mean the same in both.
//
// A compiled Regex is immutable and may be used from many threads at once
// (each search allocates its own match data).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::text {

class Regex {
 public:
  // Throws Error(kInvalidArgument) with PCRE2's message and the offset of the
  // problem when `pattern` does not compile; `where` names it in the message.
  Regex(std::string_view pattern, std::string_view where);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // [begin, end) byte ranges of the successive non-overlapping, non-empty
  // matches in `text` (valid UTF-8), left to right.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// Escapes `literal` so that it matches itself (a Split pattern given as {"String": s}).
std::string regex_escape(std::string_view literal);

}  // namespace tessera::text
