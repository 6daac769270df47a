// tessera_bench_tokenizer: encode throughput of tessera's tokenizers.
//
//   tessera_bench_tokenizer TEXT_FILE [--repeat N] NAME=MODEL_DIR...
//
// Loads each model directory's tokenizer, encodes the whole file (UTF-8) with
// add_special N times (default 5) and prints one JSON line per tokenizer:
// {"name", "bytes", "ids", "best_s", "mb_per_s"} (MB = 10^6 bytes, from the
// best run). tools/bench_tokenizer.py runs it beside the Python reference
// libraries on the same text.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_args.h"
#include "core/error.h"
#include "text/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: tessera_bench_tokenizer TEXT_FILE [--repeat N] NAME=MODEL_DIR...\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "cannot read " << argv[1] << "\n";
    return 2;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::optional<tessera::tools::BenchArgs> args = tessera::tools::parse_bench_args(argc, argv, 2, 5);
  if (!args) {
    std::cerr << "usage: tessera_bench_tokenizer TEXT_FILE [--repeat N] NAME=MODEL_DIR...\n";
    return 2;
  }
  const int repeat = args->repeat;
  try {
    for (const auto& [name, dir] : args->tokenizers) {
      const auto tokenizer = tessera::text::load_tokenizer(dir);
      double best = 1e30;
      size_t count = 0;
      for (int r = 0; r < repeat; ++r) {
        const auto start = std::chrono::steady_clock::now();
        count = tokenizer->encode(text, true).size();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::cout << nlohmann::json{{"name", name},
                                  {"bytes", text.size()},
                                  {"ids", count},
                                  {"best_s", best},
                                  {"mb_per_s", static_cast<double>(text.size()) / 1e6 / best}}
                       .dump()
                << std::endl;
    }
  } catch (const tessera::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
