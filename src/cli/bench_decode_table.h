// `tessera bench decode ... --quant none awq --batch 1 16 64`: decode speed of
// weight formats side by side, at several batch sizes, in one process and one
// table, each row against the bandwidth limit measured in the same run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::cli {

struct DecodeTableArgs {
  std::string random_shape;          // a random model of a known shape (no files)
  std::string device = "cuda";
  std::string dtype = "auto";
  std::vector<std::string> formats;  // "none" (16-bit weights) and/or "awq" (4-bit, groups of 128)
  std::vector<int64_t> batches;      // sequences decoding together
  int64_t prompt_tokens = 16;
  int64_t decode_tokens = 64;
};

int run_decode_table(const DecodeTableArgs& args);

}  // namespace tessera::cli
