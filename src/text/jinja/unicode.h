// Code-point helpers for the Jinja interpreter: Python strings are sequences
// of code points, so len(), slicing, strip() and repr() work on those, not bytes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::text::jinja {

// Decodes UTF-8; an invalid byte becomes U+FFFD (templates and inputs are
// expected to be valid UTF-8; this keeps a bad byte from ending the render).
std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view text);
void append_utf8_char(std::string& out, char32_t c);

// Python's str.isspace() and str.isprintable() for one code point.
bool is_space(char32_t c);
bool is_printable(char32_t c);

// Python's str.strip()/lstrip()/rstrip(): `chars` empty means whitespace.
std::string strip(std::string_view text, bool left, bool right, const std::u32string* chars = nullptr);

// ASCII and Latin/Greek/Cyrillic case mapping (what chat templates need).
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
std::string upper(std::string_view text);
std::string lower(std::string_view text);

}  // namespace tessera::text::jinja
