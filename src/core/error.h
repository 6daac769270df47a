// Error: the one exception type of tessera's library code.
//
// Every failure a user can cause or meet (a bad flag, a hostile model file, an
// out-of-memory, a device fault) becomes an Error with a kind the caller can act
// on, a message that says what happened, and a hint that says what to change.
// Library code throws; only src/cli turns an Error into an exit status.
#pragma once

#include <stdexcept>
#include <string>

namespace tessera {

enum class ErrorKind {
  kInvalidArgument,  // the input (request, flag, file) is wrong
  kUnsupported,      // valid, but tessera cannot do it (yet, or on this device)
  kOutOfMemory,      // an allocation failed; the message carries the sizes
  kDeviceFailure,    // a device call failed; the device may be unusable
  kCommFailure,      // a collective failed or timed out
  kInternal,         // a broken invariant: a bug in tessera
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, std::string hint = {});

  ErrorKind kind() const noexcept { return kind_; }
  const std::string& message() const noexcept { return message_; }
  const std::string& hint() const noexcept { return hint_; }

 private:
  ErrorKind kind_;
  std::string message_;
  std::string hint_;
};

// Throws Error(kInternal) naming the file and line when `condition` is false.
// For invariants only: user input is validated with a real message instead.
#define TESSERA_CHECK(condition)                                               \
  do {                                                                         \
    if (!(condition))                                                          \
      ::tessera::detail::throw_check_failure(#condition, __FILE__, __LINE__);  \
  } while (0)

namespace detail {
[[noreturn]] void throw_check_failure(const char* condition, const char* file, int line);
}  // namespace detail

}  // namespace tessera
