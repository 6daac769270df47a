#include "text/jinja/unicode.h"

#include "text/utf8.h"

namespace tessera::text::jinja {

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = utf8_sequence_length(text, pos);
    if (length == 0) {
      out += U'\uFFFD';
      ++pos;
      continue;
    }
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]); };
    char32_t c = 0;
    if (length == 1) c = byte(0);
    else if (length == 2) c = ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
    else if (length == 3) c = ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
    else
      c = ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) |
          (byte(3) & 0x3F);
    out += c;
    pos += length;
  }
  return out;
}

void append_utf8_char(std::string& out, char32_t c) {
  if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = 0xFFFD;
  append_utf8(out, c);
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) append_utf8_char(out, c);
  return out;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (is_space(c)) return false;  // separators other than ' '
  if ((c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E) ||
      (c >= 0x2060 && c <= 0x2064) || c == 0xFEFF)
    return false;  // format characters
  if ((c >= 0xD800 && c <= 0xDFFF) || (c >= 0xE000 && c <= 0xF8FF)) return false;
  return true;
}

std::string strip(std::string_view text, bool left, bool right, const std::u32string* chars) {
  const std::u32string codes = decode_utf8(text);
  const auto strippable = [&](char32_t c) {
    return chars ? chars->find(c) != std::u32string::npos : is_space(c);
  };
  size_t begin = 0, end = codes.size();
  if (left)
    while (begin < end && strippable(codes[begin])) ++begin;
  if (right)
    while (end > begin && strippable(codes[end - 1])) --end;
  return encode_utf8(std::u32string_view(codes).substr(begin, end - begin));
}

char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;           // Latin-1
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;          // Greek
  if (c >= 0x430 && c <= 0x44F) return c - 32;                        // Cyrillic
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

std::string upper(std::string_view text) {
  std::u32string codes = decode_utf8(text);
  for (auto& c : codes) c = to_upper(c);
  return encode_utf8(codes);
}

std::string lower(std::string_view text) {
  std::u32string codes = decode_utf8(text);
  for (auto& c : codes) c = to_lower(c);
  return encode_utf8(codes);
}

}  // namespace tessera::text::jinja
