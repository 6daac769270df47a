// Normalizers of a Hugging Face tokenizer.json: rewrite each span of input text
// (the text between added tokens) before it is split into words.
//
// Implemented: Sequence, Prepend, Replace (string patterns), NFC, NFD, NFKC,
// NFKD. Offsets are not tracked: tessera needs ids, not character spans.
#pragma once

#include <memory>
#include <string>

#include "text/json_field.h"

namespace tessera::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;
};

// Builds the normalizer a tokenizer.json describes (the "normalizer" value,
// not null). Throws Error(kUnsupported) naming the type it does not implement.
std::unique_ptr<Normalizer> make_normalizer(const JsonField& spec);

// The string a Replace component matches: {"String": s}. A {"Regex": r}
// pattern throws Error(kUnsupported).
std::string replace_pattern_string(const JsonField& pattern, std::string_view component);

}  // namespace tessera::text
