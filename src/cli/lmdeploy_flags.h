// LMDeploy api_server flags that tessera takes but does not act on as
// LMDeploy does. A user's LMDeploy command line should start tessera or be
// refused with what to do instead, never with the parser's "not expected":
//   --num-tokens-per-iter N   tokens a forward step takes (N > 0 sets
//                             --max-prefill-token-num, as LMDeploy's
//                             TurboMind does)
//   --max-prefill-iters N     accepted: a long prompt takes as many chunked
//                             steps as it needs
//   --ssl, --dp N (N > 1), --adapters, --revision, --download-dir,
//   --proxy-url               refused before the model loads, each with a hint
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/serving_model.h"

namespace tessera::cli {

struct LmdeployOnlyFlags {
  int64_t num_tokens_per_iter = 0;
  int64_t max_prefill_iters = 1;
  bool ssl = false;
  int64_t dp = 1;
  std::vector<std::string> adapters;
  std::string revision, download_dir, proxy_url;
};

void add_lmdeploy_only_options(CLI::App* cmd, LmdeployOnlyFlags& flags);

// --num-tokens-per-iter into the engine's arguments.
void apply_lmdeploy_aliases(const LmdeployOnlyFlags& flags, EngineArgs& engine);

// Throws Error(kUnsupported) naming the first flag tessera cannot honour and,
// in its hint, what to do instead.
void refuse_lmdeploy_only_flags(const LmdeployOnlyFlags& flags);

}  // namespace tessera::cli
