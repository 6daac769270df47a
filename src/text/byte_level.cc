#include "text/byte_level.h"

#include <array>
#include <unordered_map>

#include "text/utf8.h"

namespace tessera::text {
namespace {

struct Tables {
  std::array<std::string, 256> byte_to_char;
  std::unordered_map<char32_t, unsigned char> char_to_byte;
};

const Tables& tables() {
  static const Tables instance = [] {
    Tables t;
    char32_t next = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
      const char32_t c = printable ? static_cast<char32_t>(byte) : next++;
      append_utf8(t.byte_to_char[byte], c);
      t.char_to_byte.emplace(c, static_cast<unsigned char>(byte));
    }
    return t;
  }();
  return instance;
}

// Length of the valid prefix of the sequence at bytes[pos] (1..3) when it is
// invalid, following the Unicode "maximal subpart" rule; the whole length when valid.
size_t maximal_subpart(std::string_view bytes, size_t pos) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = at(pos);
  size_t length;
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 1;
  }
  size_t i = 1;
  for (; i < length && pos + i < bytes.size(); ++i) {
    const unsigned char c = at(pos + i);
    const bool ok = i == 1 ? (c >= low && c <= high) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return i;
  }
  return i;
}

}  // namespace

std::string to_byte_level(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += t.byte_to_char[static_cast<unsigned char>(c)];
  return out;
}

std::optional<std::string> from_byte_level(std::string_view text) {
  const Tables& t = tables();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = utf8_sequence_length(text, pos);
    if (length == 0 || length > 2) return std::nullopt;  // the table's characters are below U+0800
    char32_t c = static_cast<unsigned char>(text[pos]);
    if (length == 2) c = ((c & 0x1F) << 6) | (static_cast<unsigned char>(text[pos + 1]) & 0x3F);
    const auto it = t.char_to_byte.find(c);
    if (it == t.char_to_byte.end()) return std::nullopt;
    out += static_cast<char>(it->second);
    pos += length;
  }
  return out;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t length = utf8_sequence_length(bytes, pos);
    if (length != 0) {
      out.append(bytes.substr(pos, length));
      pos += length;
    } else {
      out += "\xEF\xBF\xBD";
      pos += maximal_subpart(bytes, pos);
    }
  }
  return out;
}

}  // namespace tessera::text
