#include "cli/lmdeploy_flags.h"

#include "core/error.h"

namespace tessera::cli {

void add_lmdeploy_only_options(CLI::App* cmd, LmdeployOnlyFlags& f) {
  const std::string group = "LMDeploy flags";
  cmd->add_option("--num-tokens-per-iter", f.num_tokens_per_iter,
                  "tokens a forward step takes (> 0: sets --max-prefill-token-num)")
      ->check(CLI::NonNegativeNumber)
      ->group(group);
  cmd->add_option("--max-prefill-iters", f.max_prefill_iters,
                  "accepted; a long prompt takes as many chunked steps as it needs")
      ->check(CLI::PositiveNumber)
      ->group(group);
  cmd->add_flag("--ssl", f.ssl, "refused: tessera serves plain HTTP")->group(group);
  cmd->add_option("--dp", f.dp, "data-parallel engines: 1 only")->check(CLI::PositiveNumber)->group(group);
  cmd->add_option("--adapters", f.adapters, "refused: LoRA adapters are not supported")->expected(1, -1)->group(group);
  cmd->add_option("--revision", f.revision, "refused: MODEL_PATH is a local directory")->group(group);
  cmd->add_option("--download-dir", f.download_dir, "refused: MODEL_PATH is a local directory")->group(group);
  cmd->add_option("--proxy-url", f.proxy_url, "refused: tessera does not register with a proxy")->group(group);
}

void apply_lmdeploy_aliases(const LmdeployOnlyFlags& f, EngineArgs& engine) {
  if (f.num_tokens_per_iter > 0) engine.max_prefill_token_num = f.num_tokens_per_iter;
}

void refuse_lmdeploy_only_flags(const LmdeployOnlyFlags& f) {
  auto refuse = [](const std::string& what, const std::string& hint) {
    throw Error(ErrorKind::kUnsupported, what, hint);
  };
  if (f.ssl) {
    refuse("--ssl: tessera serves plain HTTP",
           "terminate TLS in a reverse proxy (nginx, Caddy) in front of tessera, and drop --ssl");
  }
  if (f.dp > 1) {
    refuse("--dp " + std::to_string(f.dp) + ": tessera runs one engine a server",
           "run one tessera server per GPU (or per --tp group) and balance requests across them, or use --tp");
  }
  if (!f.adapters.empty()) {
    refuse("--adapters: LoRA adapters are not supported",
           "merge the adapter into its base model (peft's merge_and_unload) and serve the merged directory");
  }
  const std::string local =
      "MODEL_PATH is a local model directory; download it first (huggingface-cli download REPO --revision REV "
      "--local-dir DIR) and serve DIR";
  if (!f.revision.empty()) refuse("--revision: tessera does not download models", local);
  if (!f.download_dir.empty()) refuse("--download-dir: tessera does not download models", local);
  if (!f.proxy_url.empty()) {
    refuse("--proxy-url: tessera does not register with LMDeploy's proxy server",
           "add this server to the proxy through the proxy's /nodes/add route, and drop --proxy-url");
  }
}

}  // namespace tessera::cli
