// The fixtures' byte strings, written as hex so that any bytes (invalid
// UTF-8 included) survive JSON.
#pragma once

#include <string>
#include <string_view>

namespace tessera::testing {

inline std::string from_hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  }
  return out;
}

}  // namespace tessera::testing
