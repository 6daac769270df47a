// Post-processors of a Hugging Face tokenizer.json: the special tokens that
// encode(text, add_special = true) puts around a single sequence.
//
// Implemented: TemplateProcessing (its "single" template), ByteLevel (which
// only changes offsets, so it adds nothing here), Sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "text/json_field.h"

namespace tessera::text {

struct SpecialTokenTemplate {
  std::vector<int32_t> prefix;  // ids before the text, e.g. {bos}
  std::vector<int32_t> suffix;  // ids after it
};

// Reads the "post_processor" value (not null). Throws Error(kUnsupported)
// naming a type it does not implement.
SpecialTokenTemplate parse_post_processor(const JsonField& spec);

}  // namespace tessera::text
