#include "text/json_string_formats.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

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

// RFC 3986's IPv6address (RFC 4291's text forms): eight groups of 1-4 hex
// digits, one run of zero groups written "::", the last two groups possibly
// a dotted IPv4 address. No zone (Python's ipaddress, jsonschema's check,
// refuses one under this format too).
std::string ipv6() {
  const std::string h16 = "[0-9A-Fa-f]{1,4}", ls32 = "(?:" + h16 + ":" + h16 + "|" + ipv4() + ")";
  const auto groups = [&](int count) { return "(?:" + h16 + ":){" + std::to_string(count) + "}"; };
  // Up to `most` groups before the "::": nothing, or (h16:){0,most-1}h16.
  const auto before = [&](int most) {
    return most == 1 ? "(?:" + h16 + ")?" : "(?:(?:" + h16 + ":){0," + std::to_string(most - 1) + "}" + h16 + ")?";
  };
  const std::string forms[] = {
      groups(6) + ls32,           "::" + groups(5) + ls32,    before(1) + "::" + groups(4) + ls32,
      before(2) + "::" + groups(3) + ls32, before(3) + "::" + groups(2) + ls32, before(4) + "::" + h16 + ":" + ls32,
      before(5) + "::" + ls32,    before(6) + "::" + h16,     before(7) + "::",
  };
  std::string out;
  for (const std::string& form : forms) out += (out.empty() ? "(?:" : "|") + form;
  return out + ")";
}

// RFC 3986's URI: scheme ":" hier-part ["?" query] ["#" fragment], every
// character class as the RFC's grammar has it (an authority's userinfo, port;
// the four forms of a path; percent-encodings), the forms a WHATWG URL
// parser (Pydantic's AnyUrl) takes too: a host is an IPv6 literal, an IPv4
// address or a domain of letter-and-digit labels with inner hyphens, the last
// one starting with a letter (one ending in a number would be read as an
// IPv4 address; "--" could start a malformed "xn--" label); a port is at
// most 65535; http, https, ws, wss and ftp, which that parser gives a host,
// come with an authority. rfc3986-validator's "URI" rule, jsonschema's
// check, takes the same strings.
// The parts of such a URI after its scheme and ":".
struct UriParts {
  std::string authority, segments, hier, query_fragment;
};

UriParts uri_parts() {
  const std::string pct = "%[0-9A-Fa-f]{2}", unreserved_sub = R"(A-Za-z0-9\-._~!$&'()*+,;=)";
  const std::string pchar = "(?:[" + unreserved_sub + ":@]|" + pct + ")";
  const std::string userinfo = "(?:[" + unreserved_sub + ":]|" + pct + ")*";
  const std::string label = "[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*";
  const std::string domain = "(?:" + label + R"(\.)*[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)";
  const std::string host = R"((?:\[)" + ipv6() + R"(\]|)" + ipv4() + "|" + domain + ")";
  const std::string port = R"((?:6553[0-5]|655[0-2]\d|65[0-4]\d{2}|6[0-4]\d{3}|[1-5]\d{4}|\d{1,4})?)";
  UriParts parts;
  parts.authority = "(?:" + userinfo + "@)?" + host + "(?::" + port + ")?";
  parts.segments = "(?:/" + pchar + "*)*";
  parts.hier = "(?://" + parts.authority + parts.segments + "|/(?:" + pchar + "+" + parts.segments + ")?|" + pchar +
               "+" + parts.segments + "|)";
  const std::string tail = "(?:" + pchar + "|[/?])*";
  parts.query_fragment = R"((?:\?)" + tail + ")?(?:#" + tail + ")?";
  return parts;
}

std::string uri() {
  const UriParts parts = uri_parts();
  // Any other scheme: a trie of what is not one of those five, in any case.
  const std::string rest = R"([A-Za-z0-9+.\-]*)", more = R"([A-Za-z0-9+.\-]+)";
  const std::string not_t = R"([A-SU-Za-su-z0-9+.\-])", not_p = R"([A-OQ-Za-oq-z0-9+.\-])";
  const std::string not_s = R"([A-RT-Za-rt-z0-9+.\-])";
  const std::string other = "(?:[A-EGI-VX-Za-egi-vx-z]" + rest +
                            "|[Hh](?:|" + not_t + rest + "|[Tt](?:|" + not_t + rest + "|[Tt](?:|" + not_p + rest +
                            "|[Pp](?:" + not_s + rest + "|[Ss]" + more + "))))" +
                            "|[Ww](?:|" + not_s + rest + "|[Ss](?:" + not_s + rest + "|[Ss]" + more + "))" +
                            "|[Ff](?:|" + not_t + rest + "|[Tt](?:|" + not_p + rest + "|[Pp]" + more + ")))";
  const std::string special = "(?:[Hh][Tt][Tt][Pp][Ss]?|[Ww][Ss][Ss]?|[Ff][Tt][Pp])";
  return "(?:" + special + "://" + parts.authority + parts.segments + "|" + other + ":" + parts.hier + ")" +
         parts.query_fragment;
}

// Pydantic's HttpUrl: such a URI with the scheme http or https.
std::string http_url() {
  const UriParts parts = uri_parts();
  return "[Hh][Tt][Tt][Pp][Ss]?://" + parts.authority + parts.segments + parts.query_fragment;
}

// RFC 3339's duration (its appendix A): "P", then years, months, days in
// that order with nothing skipped between the first and the last given, or
// weeks alone, and a "T" part of hours, minutes, seconds the same way; the
// seconds may have a fraction (Pydantic writes PT0.5S). No negative or
// fractional larger units: what every ISO 8601 reader takes
// (jsonschema's check, isoduration, takes more). Each number has at most
// as many digits as keep the whole within what Pydantic reads as a
// timedelta (999,999,999 days; the time part's seconds a 32-bit count):
// years, months 6, days, weeks 8, hours 5, minutes 6, seconds 8 and 9
// fraction digits.
std::string duration() {
  const std::string second = R"(\d{1,8}(?:\.\d{1,9})?S)", minute = R"(\d{1,6}M(?:)" + second + ")?";
  const std::string hour = R"(\d{1,5}H(?:)" + minute + ")?";
  const std::string clock = "T(?:" + hour + "|" + minute + "|" + second + ")";
  const std::string day = R"(\d{1,8}D)", month = R"(\d{1,6}M(?:)" + day + ")?", year = R"(\d{1,6}Y(?:)" + month + ")?";
  return "P(?:(?:" + day + "|" + month + "|" + year + ")(?:" + clock + ")?|" + clock + R"(|\d{1,8}W))";
}

// RFC 1123's host name: dot-separated labels of 1-63 letters, digits and
// inner hyphens (no trailing dot), 253 characters at most
// (json_string_format_max_length).
std::string hostname() {
  const std::string label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  return label + R"((?:\.)" + label + ")*";
}

// Letters, `least` to `most` of them, spelling none of `words` (lowercase,
// each at least `least` and fewer than `most` long) in any case: a trie of the words, where each
// node may end (unless it spells a word), go on with a letter no word has
// there and any letters after it, or follow a word's next letter.
std::string letters_except(const std::vector<std::string>& words, size_t least, size_t most,
                           const std::string& prefix = "") {
  std::string children;  // the words' next letters after `prefix`
  for (const std::string& w : words) {
    if (w.size() > prefix.size() && w.starts_with(prefix) && children.find(w[prefix.size()]) == std::string::npos) {
      children += w[prefix.size()];
    }
  }
  std::string others, out;
  for (char c = 'a'; c <= 'z'; ++c) {
    if (children.find(c) == std::string::npos) others += std::string(1, c) + static_cast<char>(c - 'a' + 'A');
  }
  const size_t at = prefix.size() + 1;  // letters once one more is written
  if (prefix.size() >= least && std::find(words.begin(), words.end(), prefix) == words.end()) out += "|";
  if (at <= most) {
    const size_t tail_least = at >= least ? 0 : least - at;
    out += "[" + others + "][A-Za-z]{" + std::to_string(tail_least) + "," + std::to_string(most - at) + "}";
    for (char c : children) {
      out += "|[" + std::string(1, c) + static_cast<char>(c - 'a' + 'A') + "]" +
             letters_except(words, least, most, prefix + c);
    }
  }
  return "(?:" + out + ")";
}

// An address Pydantic's EmailStr (email-validator) takes too: a dot-atom
// local part of up to four atoms of 15 characters, "@", one to three labels
// of letters and digits with up to two inner hyphens (at most 47
// characters; no "--" that could start a malformed "xn--") and a top label
// of 2 to 24 letters that names no special-use domain (arpa, invalid,
// local, localhost, onion, test): 232 characters at most, of the 254 an
// address may have.
std::string email() {
  const std::string atom = R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,15})";
  const std::string label = "[A-Za-z0-9]{1,15}(?:-[A-Za-z0-9]{1,15}){0,2}";
  const std::string top = letters_except({"arpa", "invalid", "local", "localhost", "onion", "test"}, 2, 24);
  return atom + R"((?:\.)" + atom + "){0,3}@(?:" + label + R"(\.){1,3})" + top;
}

// Pydantic's IPv4Network: an address whose bits past the prefix length are
// zero ("10.128.0.0/9"), or a bare address (a /32). Each prefix length p is
// its own alternative: p / 8 octets of any byte, then one of the multiples of
// 2^(8 - p % 8) where p % 8 is not 0, then zeros.
std::string ipv4_network() {
  const std::string byte = R"((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  std::string out = "(?:" + ipv4();
  for (int p = 0; p <= 32; ++p) {
    std::vector<std::string> octets(static_cast<size_t>(p / 8), byte);
    if (p % 8 != 0) {
      std::string multiples;
      for (int v = 0; v < 256; v += 1 << (8 - p % 8)) multiples += (multiples.empty() ? "" : "|") + std::to_string(v);
      octets.push_back("(?:" + multiples + ")");
    }
    while (octets.size() < 4) octets.push_back("0");
    out += "|" + octets[0] + R"(\.)" + octets[1] + R"(\.)" + octets[2] + R"(\.)" + octets[3] + "/" + std::to_string(p);
  }
  return out + ")";
}

// Pydantic's IPv6Network, the forms written: a bare address or one with
// /128, "::/0", and k = 1 to 7 groups then "::" with the prefix 16k
// ("2001:db8::/32"), whose bits past it are the zeros "::" stands for.
std::string ipv6_network() {
  std::string out = "(?:" + ipv6() + "(?:/128)?|::/0";
  for (int k = 1; k <= 7; ++k) out += "|(?:[0-9A-Fa-f]{1,4}:){" + std::to_string(k) + "}:/" + std::to_string(16 * k);
  return out + ")";
}

// Pydantic's IPv4Interface and IPv6Interface: an address, and a prefix
// length (0 to 32, 0 to 128) if any.
std::string ipv4_interface() { return ipv4() + "(?:/(?:3[0-2]|[12]?\\d))?"; }
std::string ipv6_interface() { return ipv6() + "(?:/(?:12[0-8]|1[01]\\d|[1-9]?\\d))?"; }

// Pydantic's UUID1 ... UUID8: RFC 4122's variant (the 17th digit 8, 9, a
// or b; Python's UUID.version is None for any other) and the version digit.
template <char kVersion>
std::string uuid_version() {
  return std::string(R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-)") + kVersion +
         R"([0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12})";
}

const std::array<std::pair<std::string_view, std::string (*)()>, 26> kFormats = {{
    {"date", date},
    {"time", time},
    {"date-time", [] { return date() + "T" + time(); }},
    {"duration", duration},
    {"uuid", [] { return std::string(R"([0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12})"); }},
    {"ipv4", ipv4},
    {"ipv6", ipv6},
    {"email", email},
    {"hostname", hostname},
    {"uri", uri},
    // Pydantic's own formats.
    {"uuid1", uuid_version<'1'>},
    {"uuid3", uuid_version<'3'>},
    {"uuid4", uuid_version<'4'>},
    {"uuid5", uuid_version<'5'>},
    {"uuid6", uuid_version<'6'>},
    {"uuid7", uuid_version<'7'>},
    {"uuid8", uuid_version<'8'>},
    {"ipvanyaddress", [] { return "(?:" + ipv4() + "|" + ipv6() + ")"; }},
    {"ipv4network", ipv4_network},
    {"ipv6network", ipv6_network},
    {"ipvanynetwork", [] { return "(?:" + ipv4_network() + "|" + ipv6_network() + ")"; }},
    {"ipv4interface", ipv4_interface},
    {"ipv6interface", ipv6_interface},
    {"ipvanyinterface", [] { return "(?:" + ipv4_interface() + "|" + ipv6_interface() + ")"; }},
    // SecretStr: any string.
    {"password", [] { return std::string(R"([\s\S]*)"); }},
    // bytes, which Pydantic reads from a JSON string as its UTF-8 encoding
    // and whose maxLength it counts in bytes: ASCII, one byte a character.
    {"binary", [] { return std::string(R"([\x00-\x7F]*)"); }},
}};

}  // namespace

std::optional<std::string> json_string_format_pattern(std::string_view format, int64_t max_length) {
  // Pydantic's HttpUrl is {"format": "uri", "maxLength": 2083}, and takes
  // http and https only: such a string is written with one of them.
  if (format == "uri" && max_length == kHttpUrlMaxLength) return "^" + http_url() + "$";
  for (const auto& [name, pattern] : kFormats) {
    if (name == format) return "^" + pattern() + "$";
  }
  return std::nullopt;
}

int64_t json_string_format_max_length(std::string_view format) { return format == "hostname" ? 253 : -1; }

std::string json_string_format_names() {
  std::string out;
  for (const auto& [name, pattern] : kFormats) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

}  // namespace tessera::text
