// StopStringMatcher: OpenAI's `stop` over streamed text. Generation ends at
// the first occurrence of any stop string; the text before it is the output
// and the stop string itself is not. While streaming, text that could be the
// start of a stop string ("<|" when "<|end|>" is one) is held back until the
// next chunk shows whether it is.
//
// One instance per sequence; not thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text {

class StopStringMatcher {
 public:
  struct Result {
    std::string text;                 // safe to send now
    std::optional<size_t> stop_index;  // set once a stop string matched: its index in the list
  };

  // Empty stop strings are ignored (they would stop before any text).
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Adds `chunk` (whole UTF-8 characters, as IncrementalDetokenizer hands
  // them out). After a match, returns the text up to the stop string and
  // stop_index; later calls return nothing.
  Result feed(std::string_view chunk);
  // The stream ended without a match: the text still held back.
  std::string finish();

  bool stopped() const { return stop_index_.has_value(); }
  std::optional<size_t> stop_index() const { return stop_index_; }
  // Bytes currently held back.
  size_t held() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;  // as given, empty ones included, so indices match
  std::string pending_;              // text not yet handed out: a possible start of a stop string
  std::optional<size_t> stop_index_;
};

}  // namespace tessera::text
