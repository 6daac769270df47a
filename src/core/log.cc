#include "core/log.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "core/error.h"

namespace tessera {

namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_write_mutex;  // keeps lines from different threads whole

const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kOff: return "OFF";
  }
  return "?";
}
}  // namespace

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }

LogLevel parse_log_level(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  if (upper == "DEBUG") return LogLevel::kDebug;
  if (upper == "INFO") return LogLevel::kInfo;
  if (upper == "WARNING" || upper == "WARN") return LogLevel::kWarning;
  if (upper == "ERROR" || upper == "CRITICAL") return LogLevel::kError;
  if (upper == "OFF") return LogLevel::kOff;
  throw Error(ErrorKind::kInvalidArgument, fmt::format("unknown log level '{}'", name),
              "use one of DEBUG, INFO, WARNING, ERROR, CRITICAL");
}

void log_line(LogLevel level, std::string_view text) {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm local{};
  localtime_r(&seconds, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  std::lock_guard<std::mutex> lock(g_write_mutex);
  std::fprintf(stderr, "%s %-7s tessera: %.*s\n", stamp, level_tag(level), static_cast<int>(text.size()), text.data());
}

}  // namespace tessera
