#include "text/json_string_formats.h"

#include <array>
#include <utility>

namespace tessera::text {
namespace {

// Years 0001-9999; leap years: divisible by 4 and not by 100, or by 400.
constexpr std::string_view kYear = R"((?:[1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9]))";
constexpr std::string_view kLeapYear = R"((?:\d{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00))";

std::string date() {
  const std::string month_day = R"((?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30))"
                                R"(|02-(?:0[1-9]|1\d|2[0-8])))";
  return "(?:" + std::string(kYear) + "-" + month_day + "|" + std::string(kLeapYear) + "-02-29)";
}

std::string time() {
  return R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
}

std::string ipv4() {
  const std::string byte = R"((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  return "(?:" + byte + R"(\.){3})" + byte;
}

std::string email() {
  const std::string atom = R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)";
  const std::string label = R"([A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)";
  return atom + R"((?:\.)" + atom + ")*@(?:" + label + R"(\.)+[A-Za-z]{2,63})";
}

const std::array<std::pair<std::string_view, std::string (*)()>, 6> kFormats = {{
    {"date", date},
    {"time", time},
    {"date-time", [] { return date() + "T" + time(); }},
    {"uuid", [] { return std::string(R"([0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12})"); }},
    {"ipv4", ipv4},
    {"email", email},
}};

}  // namespace

std::optional<std::string> json_string_format_pattern(std::string_view format) {
  for (const auto& [name, pattern] : kFormats) {
    if (name == format) return "^" + pattern() + "$";
  }
  return std::nullopt;
}

std::string json_string_format_names() {
  std::string out;
  for (const auto& [name, pattern] : kFormats) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

}  // namespace tessera::text
