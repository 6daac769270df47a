// `tessera generate MODEL_DIR --prompt TEXT`: one generation, the text on
// stdout and nothing else (logs go to stderr).
#include <cstdio>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/generate.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

namespace tessera::cli {

namespace {
struct GenerateArgs {
  std::string model_dir;
  std::string prompt;
  int64_t max_tokens = 128;
  float temperature = 0.0f;
  uint64_t seed = 0;
  std::string device = "cpu";
  std::string dtype = "auto";
  bool ignore_eos = false;
};

int run_generate(const GenerateArgs& args) {
  const Device device = parse_device(args.device);
  const DType dtype = backend::choose_compute_dtype(args.dtype, device);
  std::unique_ptr<backend::Backend> backend =
      device.is_cpu() ? backend::make_cpu_backend() : backend::make_cuda_backend(device.index, dtype);
  std::unique_ptr<text::Tokenizer> tokenizer = text::load_tokenizer(args.model_dir);
  std::unique_ptr<model::Transformer> model = model::load_transformer(args.model_dir, *backend);

  std::vector<int32_t> prompt = tokenizer->encode(args.prompt, /*add_special=*/true);
  if (prompt.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "the prompt encodes to no tokens and the tokenizer adds no BOS",
                "give a non-empty --prompt");
  }
  engine::GenerateOptions options;
  options.max_new_tokens = args.max_tokens;
  options.sampling = {args.temperature, args.seed};
  if (!args.ignore_eos) options.stop_ids = model->spec().eos_token_ids;

  std::vector<int32_t> generated;
  std::string printed;
  // Prints the text as it grows; holds back an incomplete UTF-8 tail, which
  // decodes to U+FFFD until its last byte arrives.
  auto on_token = [&](int32_t token) {
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end()) return;
    generated.push_back(token);
    std::string text = tokenizer->decode(generated, /*skip_special=*/true);
    if (text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0) return;
    if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
      std::fwrite(text.data() + printed.size(), 1, text.size() - printed.size(), stdout);
      std::fflush(stdout);
      printed = text;
    }
  };
  engine::GenerateResult result = engine::generate(*model, prompt, options, on_token);
  std::string text = tokenizer->decode(generated, /*skip_special=*/true);
  if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
    std::fwrite(text.data() + printed.size(), 1, text.size() - printed.size(), stdout);
  }
  std::fputc('\n', stdout);
  log_info("generated {} tokens ({})", result.tokens.size(),
           result.finish_reason == engine::FinishReason::kStop ? "stop" : "length");
  return 0;
}
}  // namespace

void add_generate_command(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt; prints only the text");
  cmd->add_option("model_dir", args->model_dir, "Hugging Face model directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--prompt", args->prompt, "prompt text (empty: start from BOS alone)");
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate at most")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", args->temperature, "0 for greedy")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", args->seed, "random seed for sampling")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto, float16, bfloat16 or float32 (auto: bf16 where the GPU has it)")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past the end-of-sequence token");
  cmd->callback([&runner, args] { runner = [args] { return run_generate(*args); }; });
}

}  // namespace tessera::cli
