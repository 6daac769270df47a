// The command line the tokenizer benchmarks share: [--repeat N] NAME=MODEL_DIR...
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::tools {

struct BenchArgs {
  int repeat = 1;
  std::vector<std::pair<std::string, std::string>> tokenizers;  // (NAME, MODEL_DIR)
};

// argv[first..argc): --repeat N and NAME=MODEL_DIR arguments; nullopt for
// anything else or when no tokenizer is named.
inline std::optional<BenchArgs> parse_bench_args(int argc, char** argv, int first, int default_repeat) {
  BenchArgs args;
  args.repeat = default_repeat;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeat" && i + 1 < argc) {
      args.repeat = std::max(1, std::stoi(argv[++i]));
    } else if (const size_t eq = arg.find('='); eq != std::string::npos) {
      args.tokenizers.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
    } else {
      return std::nullopt;
    }
  }
  if (args.tokenizers.empty()) return std::nullopt;
  return args;
}

}  // namespace tessera::tools
