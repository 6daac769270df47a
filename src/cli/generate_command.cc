// `tessera generate MODEL_DIR --prompt TEXT`: one generation, the text on
// stdout and nothing else (logs go to stderr). With --tp N the model is split
// over N tensor-parallel ranks (threads of this process: CPU ranks, or one GPU
// each with --device cuda; several on one GPU with TESSERA_TP_SAME_DEVICE=1)
// and the request runs through the serving engine, as `serve --tp N` runs it.
#include <fmt/format.h>

#include <cstdio>
#include <functional>
#include <optional>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/serving_model.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/tp_executor.h"
#include "model/loader/hf_config.h"
#include "model/loader/quantized_linear.h"
#include "model/shard.h"
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
  int tp = 1;
  bool disable_custom_all_reduce = false;
  std::string model_format;  // empty: from config.json
  bool eager_mode = false;   // no CUDA graphs for decode steps
};

// The generation of `options` through an Engine over `tp` ranks (`plan`): the
// same Sampler and stop rules as engine::generate.
engine::GenerateResult generate_tensor_parallel(const model::HostModel& model, int tp, const comm::CommPlan& plan,
                                                DType dtype,
                                                const std::vector<int32_t>& prompt,
                                                const engine::GenerateOptions& options, bool ignore_eos,
                                                const std::function<void(int32_t)>& on_token) {
  const int64_t total = static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  if (model.spec.rope_scaling.type == model::RopeScalingType::kNone && total > model.spec.max_position_embeddings) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("prompt ({} tokens) plus max tokens ({}) exceeds the model's context of {} tokens",
                            prompt.size(), options.max_new_tokens, model.spec.max_position_embeddings),
                "shorten the prompt or lower --max-tokens");
  }
  engine::EngineConfig config;
  config.block_size = options.block_size;
  config.num_blocks = (total + options.block_size - 1) / options.block_size;
  config.session_len = std::max<int64_t>(total, 2);
  config.eos_ids = model.spec.eos_token_ids;
  engine::TpExecutorConfig executor_config;
  executor_config.tp = tp;
  executor_config.num_blocks = config.num_blocks;
  executor_config.block_size = config.block_size;
  executor_config.comm_plan = plan;
  executor_config.compute_dtype = dtype;
  engine::Engine engine(config, std::make_unique<engine::TpExecutor>(model, executor_config));

  engine::Request request;
  request.prompt = prompt;
  request.sampling = options.sampling;
  request.max_tokens = options.max_new_tokens;
  request.ignore_eos = ignore_eos;
  std::shared_ptr<engine::RequestStream> stream = engine.submit(request);
  engine::GenerateResult result;
  while (true) {
    engine::TokenEvent event = stream->next();
    if (event.has_token()) {
      result.tokens.push_back(event.token);
      if (on_token) on_token(event.token);
    }
    if (!event.last()) continue;
    if (*event.finish == engine::FinishReason::kError) {
      throw Error(event.error_kind.value_or(ErrorKind::kInternal), event.error);
    }
    result.finish_reason =
        *event.finish == engine::FinishReason::kStop ? engine::FinishReason::kStop : engine::FinishReason::kLength;
    return result;
  }
}

int run_generate(const GenerateArgs& args) {
  const Device device = parse_device(args.device);
  comm::CommPlan comm_plan;  // where the ranks run: decided before anything touches a device
  if (args.tp > 1) {
    model::check_tp_size(model::read_model_spec(args.model_dir), args.tp);  // before reading the weights
    comm_plan = choose_tp_comm(args.tp, device, args.disable_custom_all_reduce);
  }
  const DType dtype = backend::choose_compute_dtype(args.dtype, device);
  model::check_model_format(model::read_model_spec(args.model_dir), args.model_format, args.model_dir);
  std::unique_ptr<text::Tokenizer> tokenizer = text::load_tokenizer(args.model_dir);
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<model::Transformer> model;
  std::optional<model::HostModel> host_model;
  check_weights_fit_on_gpus(model::read_model_spec(args.model_dir), dtype, args.tp, device, args.tp > 1 ? &comm_plan : nullptr);
  if (args.tp > 1) {
    host_model = model::read_host_model(args.model_dir);
  } else {
    backend = device.is_cpu() ? backend::make_cpu_backend() : backend::make_cuda_backend(device.index, dtype);
    model = model::load_transformer(args.model_dir, *backend);
    if (args.eager_mode) model->set_graphs_enabled(false);
  }
  const model::ModelSpec& spec = host_model ? host_model->spec : model->spec();

  std::vector<int32_t> prompt = tokenizer->encode(args.prompt, /*add_special=*/true);
  if (prompt.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "the prompt encodes to no tokens and the tokenizer adds no BOS",
                "give a non-empty --prompt");
  }
  engine::GenerateOptions options;
  options.max_new_tokens = args.max_tokens;
  options.sampling.temperature = args.temperature;
  options.sampling.seed = args.seed;
  if (!args.ignore_eos) options.stop_ids = spec.eos_token_ids;

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
  engine::GenerateResult result =
      host_model ? generate_tensor_parallel(*host_model, args.tp, comm_plan, dtype, prompt, options, args.ignore_eos,
                                            on_token)
                 : engine::generate(*model, prompt, options, on_token);
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
  cmd->add_flag("--eager-mode", args->eager_mode, "launch decode kernels one by one instead of replaying CUDA graphs");
  cmd->add_option("--tp", args->tp, "tensor-parallel ranks (threads of this process: one GPU each, or CPU ranks)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--disable-custom-all-reduce", args->disable_custom_all_reduce,
                "NCCL for every collective, even where every pair of GPUs has peer access");
  cmd->add_option("--model-format", args->model_format, "hf, awq, gptq or fp8 (default: read from config.json)")
      ->check(CLI::IsMember({"hf", "llama", "awq", "gptq", "fp8"}));
  cmd->callback([&runner, args] { runner = [args] { return run_generate(*args); }; });
}

}  // namespace tessera::cli
