// Byte-level BPE (GPT-2, Llama 3, Qwen2): every byte of the text is written as
// one printable character before BPE sees it, so the vocabulary needs no
// byte fallback ("Ġ" is the space, "Ċ" the newline). The table is GPT-2's
// bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100 onwards in byte order.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tessera::text {

// Each byte of `bytes` as its character (UTF-8).
std::string to_byte_level(std::string_view bytes);

// The bytes whose characters `text` holds; nullopt when a character of `text`
// is not in the table (such a token decodes as its own UTF-8, as in HF).
std::optional<std::string> from_byte_level(std::string_view text);

// `bytes` as UTF-8 text with each maximal invalid subsequence replaced by one
// U+FFFD: Rust's String::from_utf8_lossy, which HF's ByteLevel decoder uses
// (and Python's bytes.decode("utf-8", "replace")).
std::string utf8_lossy(std::string_view bytes);

}  // namespace tessera::text
