#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include "core/error.h"
#include "text/utf8.h"

namespace tessera::text {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, std::string_view where) : compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: the regex does not compile at offset {}: {}", where, offset,
                            reinterpret_cast<const char*>(message)));
  }
  // JIT makes matching several times faster; the interpreter is the fallback.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  if (data == nullptr) throw Error(ErrorKind::kOutOfMemory, "cannot allocate regex match data");
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    // The text was checked as UTF-8 already; PCRE2_NO_UTF_CHECK avoids checking it again per match.
    const int rc = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("regex match failed: {}", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
    } else {  // an empty match: step over one character
      if (begin >= text.size()) break;
      start = begin + std::max<size_t>(1, utf8_sequence_length(text, begin));
    }
  }
  pcre2_match_data_free(data);
  return matches;
}

std::string regex_escape(std::string_view literal) {
  // \Q...\E quotes everything but a literal "\E", which is split out.
  std::string escaped = "\\Q";
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal.substr(i).starts_with("\\E")) {
      escaped += "\\E\\\\E\\Q";
      ++i;
    } else {
      escaped += literal[i];
    }
  }
  return escaped + "\\E";
}

}  // namespace tessera::text
