// UTF-8 helpers for the tokenizers, which work on code points (BPE symbols)
// and on raw bytes (byte-fallback pieces) of the same text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::text {

// Length in bytes of the UTF-8 sequence starting at text[pos], or 0 when the
// bytes there are not a valid, shortest-form sequence (overlong forms,
// surrogates and values past U+10FFFF are invalid, as in Rust's str).
size_t utf8_sequence_length(std::string_view text, size_t pos);

// The byte offset of the first invalid sequence, or nullopt for valid UTF-8.
std::optional<size_t> find_invalid_utf8(std::string_view text);

bool is_valid_utf8(std::string_view text);

// Number of code points in valid UTF-8 text.
size_t utf8_length(std::string_view text);

// Appends the UTF-8 encoding of `code_point` (which must be a valid scalar value).
void append_utf8(std::string& out, char32_t code_point);

// Replaces every occurrence of `from` (non-empty) with `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace tessera::text
