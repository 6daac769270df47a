// Prints a backtrace when a GPU test program crashes, so a failure on a remote
// GPU machine (often without a debugger) still says where it happened.
#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

namespace {
void print_backtrace(int signal_number) {
  void* frames[64];
  int count = backtrace(frames, 64);
  const char header[] = "\n*** crash: backtrace ***\n";
  write(STDERR_FILENO, header, sizeof(header) - 1);
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  std::signal(signal_number, SIG_DFL);
  raise(signal_number);
}
const bool installed = [] {
  std::signal(SIGSEGV, print_backtrace);
  std::signal(SIGABRT, print_backtrace);
  return true;
}();
}  // namespace
