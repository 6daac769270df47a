// Logging: levelled lines on stderr, so stdout stays clean for program output
// (`tessera generate` prints only the generated text there).
//
// A hand-written sink rather than spdlog: one stream, one format and a level
// filter is all tessera needs, and fmt (which spdlog wraps) does the formatting.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace tessera {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
// Accepts LMDeploy's names (DEBUG, INFO, WARNING, ERROR, CRITICAL), any case.
// Throws Error(kInvalidArgument) naming the accepted values otherwise.
LogLevel parse_log_level(std::string_view name);

void log_line(LogLevel level, std::string_view text);

template <typename... Args>
void log_debug(fmt::format_string<Args...> format, Args&&... args) {
  if (log_level() <= LogLevel::kDebug) log_line(LogLevel::kDebug, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  if (log_level() <= LogLevel::kInfo) log_line(LogLevel::kInfo, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warning(fmt::format_string<Args...> format, Args&&... args) {
  if (log_level() <= LogLevel::kWarning) log_line(LogLevel::kWarning, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void log_error(fmt::format_string<Args...> format, Args&&... args) {
  if (log_level() <= LogLevel::kError) log_line(LogLevel::kError, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tessera
