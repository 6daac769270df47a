#include "core/error.h"

#include <fmt/format.h>

namespace tessera {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return "invalid_argument";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kOutOfMemory: return "out_of_memory";
    case ErrorKind::kDeviceFailure: return "device_failure";
    case ErrorKind::kCommFailure: return "comm_failure";
    case ErrorKind::kInternal: return "internal";
  }
  return "unknown";
}

static std::string full_text(ErrorKind kind, const std::string& message, const std::string& hint) {
  std::string text = fmt::format("{}: {}", error_kind_name(kind), message);
  if (!hint.empty()) text += fmt::format(" (hint: {})", hint);
  return text;
}

Error::Error(ErrorKind kind, std::string message, std::string hint)
    : std::runtime_error(full_text(kind, message, hint)),
      kind_(kind),
      message_(std::move(message)),
      hint_(std::move(hint)) {}

namespace detail {
void throw_check_failure(const char* condition, const char* file, int line) {
  throw Error(ErrorKind::kInternal, fmt::format("check failed: {} at {}:{}", condition, file, line),
              "this is a bug in tessera; please report it with the command that triggered it");
}
}  // namespace detail

}  // namespace tessera
