// Pre-tokenizers of a Hugging Face tokenizer.json: split each normalized span
// of text into the words the model encodes one at a time.
//
// Implemented: Sequence, Metaspace (the SentencePiece "▁" convention), Split
// (a regex or string pattern, every split behavior, invert) and ByteLevel
// (byte-level BPE: GPT-2, Llama 3, Qwen2).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/json_field.h"

namespace tessera::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the words of `text` to `words`. `at_start` is true when `text`
  // begins the input (HF: its original offset is 0), which Metaspace's
  // prepend_scheme "first" depends on.
  virtual void split(std::string text, bool at_start, std::vector<std::string>& words) const = 0;
};

// Builds the pre-tokenizer a tokenizer.json describes (the "pre_tokenizer"
// value, not null). Throws Error(kUnsupported) naming a type it does not implement.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonField& spec);

// How Metaspace (pre-tokenizer and decoder) treats the first word.
enum class PrependScheme { kAlways, kFirst, kNever };

// Reads "prepend_scheme", or the older "add_prefix_space" flag it replaced.
PrependScheme parse_prepend_scheme(const JsonField& spec);

// Metaspace's replacement character (one code point, "▁" by default).
std::string parse_metaspace_replacement(const JsonField& spec);

}  // namespace tessera::text
