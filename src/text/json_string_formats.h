// JSON Schema's `format` for strings, as the ECMAScript regular expressions
// structured output writes them by (regex_automaton.h). Each admits a subset
// of what its RFC allows, the forms every reader takes:
//   date       RFC 3339 full-date, YYYY-MM-DD: days per month, February 29th
//              in leap years only, years 0001 to 9999;
//   time       RFC 3339 full-time, HH:MM:SS with 1-9 fraction digits and
//              Z or ±HH:MM (no leap second);
//   date-time  date, "T", time;
//   duration   RFC 3339's duration, P1Y2M3DT4H5M6.5S or P3W (a fraction
//              only on seconds, no sign; numbers short enough for a
//              Pydantic timedelta);
//   uuid       RFC 4122's 8-4-4-4-12 hex digits;
//   ipv4       four decimal bytes without leading zeros;
//   ipv6       RFC 4291's text forms (one "::", a trailing IPv4 address
//              allowed), no zone;
//   email      a dot-atom local part, "@", dot-separated host labels of
//              letters, digits and inner hyphens ending in a letters-only
//              top label (no quoted local parts, no address literals), as
//              email-validator (Pydantic's EmailStr) takes it too;
//   hostname   RFC 1123: dot-separated labels of 1-63 letters, digits and
//              inner hyphens, no trailing dot, at most 253 characters;
//   uri        RFC 3986's URI (a scheme, ":", an authority or a path, a
//              query, a fragment; percent-encodings) in the forms a WHATWG
//              URL parser takes too (json_string_formats.cc says which);
// And Pydantic's formats:
//   uuid1, uuid3 ... uuid8  a uuid of that version and RFC 4122's variant;
//   ipvanyaddress           ipv4 or ipv6;
//   ipv4network, ipv6network, ipvanynetwork  an address with a prefix length
//                           whose bits past it are zero, or a bare address
//                           (IPv6: "::/0", k groups then "::/16k", /128);
//   ipv4interface, ipv6interface, ipvanyinterface  an address, and a prefix
//                           length if any;
//   password (SecretStr)    any string;
//   binary (bytes)          ASCII only, so that a maxLength, which Pydantic
//                           counts in bytes, holds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::text {

// Pydantic's HttpUrl: format uri with this maxLength.
inline constexpr int64_t kHttpUrlMaxLength = 2083;

// The pattern (anchored at both ends) of `format`, or nullopt for a format
// not listed above. A uri whose maxLength is kHttpUrlMaxLength is written
// with the scheme http or https, which Pydantic's HttpUrl takes alone.
std::optional<std::string> json_string_format_pattern(std::string_view format, int64_t max_length = -1);

// The most characters `format` allows whatever the schema's maxLength
// (hostname: 253), or -1 for no such bound.
int64_t json_string_format_max_length(std::string_view format);

// The names above, for error messages: "date, time, ...".
std::string json_string_format_names();

}  // namespace tessera::text
