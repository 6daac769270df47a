// Decoders of a Hugging Face tokenizer.json: turn the pieces of a list of ids
// back into text. Each step maps a list of strings to a list of strings (HF's
// decode_chain); the text is their concatenation.
//
// Implemented: Sequence, Replace (string patterns), ByteFallback, Fuse, Strip,
// Metaspace, ByteLevel.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/json_field.h"

namespace tessera::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Builds the decoder a tokenizer.json describes (the "decoder" value, not
// null). Throws Error(kUnsupported) naming a type it does not implement.
std::unique_ptr<Decoder> make_decoder(const JsonField& spec);

// Parses "<0xXX>" (exactly, upper- or lower-case hex) into the byte it names.
std::optional<unsigned char> parse_byte_piece(std::string_view piece);

// "<0xXX>" for `byte`, upper-case hex as SentencePiece and HF write it.
std::string byte_piece(unsigned char byte);

}  // namespace tessera::text
