#include "text/stop_strings.h"

#include <algorithm>

namespace tessera::text {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {}

StopStringMatcher::Result StopStringMatcher::feed(std::string_view chunk) {
  Result result;
  if (stopped()) return result;
  pending_ += chunk;

  // The stop string that is complete first, as if the text came one byte at a
  // time, so the outcome does not depend on how the text was cut into chunks:
  // the smallest end, then the earliest start, then the first in the list.
  size_t best = std::string::npos;
  size_t best_end = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) continue;
    const size_t at = pending_.find(stops_[i]);
    if (at == std::string::npos) continue;
    const size_t end = at + stops_[i].size();
    if (end < best_end || (end == best_end && at < best)) {
      best = at;
      best_end = end;
      stop_index_ = i;
    }
  }
  if (best != std::string::npos) {
    result.text = pending_.substr(0, best);
    result.stop_index = stop_index_;
    pending_.clear();
    return result;
  }

  // Hold the longest suffix that is a proper prefix of a stop string. Such a
  // suffix starts on a character boundary, since stop strings are UTF-8 text.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t length = std::min(stop.size() - (stop.empty() ? 0 : 1), pending_.size()); length > hold; --length) {
      if (std::string_view(pending_).substr(pending_.size() - length) == std::string_view(stop).substr(0, length)) {
        hold = length;
        break;
      }
    }
  }
  result.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return result;
}

std::string StopStringMatcher::finish() {
  std::string rest = stopped() ? std::string() : std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace tessera::text
