// Where tests find their data: committed fixtures, and the shared real files
// (stories260K, tokenizers, chat templates) that may be absent on a user's clone.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::testing {

inline std::filesystem::path testdata_dir() {
  const char* env = std::getenv("TESSERA_TESTDATA");
  return env ? std::filesystem::path(env) : std::filesystem::path(TESSERA_TESTDATA_DEFAULT);
}

// TESSERA_FIXTURES overrides the source tree's fixtures (for test binaries run
// from another checkout, e.g. on a GPU machine).
inline std::filesystem::path fixtures_dir() {
  const char* env = std::getenv("TESSERA_FIXTURES");
  return env ? std::filesystem::path(env) : std::filesystem::path(TESSERA_FIXTURES);
}

inline std::filesystem::path tessera_binary() { return TESSERA_BINARY; }

// The golden checkpoints (tools/make_golden.py): every fixtures/golden/<case>
// with an expected.json, sorted; empty when the folder is absent.
inline std::vector<std::filesystem::path> golden_cases() {
  std::vector<std::filesystem::path> cases;
  const std::filesystem::path root = fixtures_dir() / "golden";
  if (!std::filesystem::exists(root)) return cases;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (std::filesystem::exists(entry.path() / "expected.json")) cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

}  // namespace tessera::testing

// Skips the current test with a message when a shared test file is missing.
#define TESSERA_REQUIRE_TESTDATA(relative)                                              \
  do {                                                                                  \
    if (!std::filesystem::exists(::tessera::testing::testdata_dir() / (relative)))      \
      GTEST_SKIP() << "test data " << (relative) << " not found under "                 \
                   << ::tessera::testing::testdata_dir() << " (set TESSERA_TESTDATA)";  \
  } while (0)
