#include "cli/serving_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "comm/nccl_communicator.h"
#include "comm/tcp_rendezvous.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/cpu_executor.h"
#include "engine/tp_executor.h"
#include "engine/warmup.h"
#include "model/arch/architecture.h"
#include "model/loader/hf_config.h"
#include "model/loader/quantized_linear.h"
#include "model/shard.h"

namespace tessera::cli {

namespace {

// A local directory. LMDeploy also takes a hub repository id and downloads
// it; tessera reads no network, so the message says how to get the directory.
const CLI::Validator kModelDirectory(
    [](std::string& path) -> std::string {
      if (std::filesystem::is_directory(path)) return {};
      return fmt::format(
          "{} is not a directory. tessera serves a local Hugging Face model directory; for a hub repository, "
          "download it first (huggingface-cli download {} --local-dir DIR) and pass DIR",
          path, path);
    },
    "DIR");

}  // namespace

void add_engine_options(CLI::App* cmd, EngineArgs& a) {
  cmd->add_option("model_path", a.model_path, "Hugging Face model directory")->required()->check(kModelDirectory);
  cmd->add_option("--backend", a.backend, "turbomind (the GPU engine), pytorch (accepted: the same engine) or cpu")
      ->capture_default_str()
      ->check(CLI::IsMember({"turbomind", "pytorch", "cpu"}));
  cmd->add_option("--device", a.device, "auto, cpu, cuda or cuda:N (auto: the first GPU, else the CPU)")
      ->capture_default_str();
  cmd->add_option("--dtype", a.dtype, "auto, float16, bfloat16 or float32 (auto: bfloat16 where the GPU has it)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "float16", "bfloat16", "float32"}));
  cmd->add_option("--tp", a.tp, "tensor-parallel GPUs")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--disable-custom-all-reduce", a.disable_custom_all_reduce,
                "NCCL for every collective, even where every pair of GPUs has peer access");
  // LMDeploy's name for the same choice: nccl is --disable-custom-all-reduce; native and cuda-ipc (its
  // peer-to-peer all-reduce) are the default, the custom all-reduce where every pair has peer access.
  cmd->add_option_function<std::string>(
         "--communicator", [&a](const std::string& value) { if (value == "nccl") a.disable_custom_all_reduce = true; },
         "nccl (NCCL for every collective), native or cuda-ipc (the default: the custom all-reduce where every pair "
         "of GPUs has peer access, NCCL otherwise)")
      ->check(CLI::IsMember({"nccl", "native", "cuda-ipc"}));
  cmd->add_option("--session-len", a.session_len, "tokens per session, prompt and output (default: the model's context)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-batch-size", a.max_batch_size, "sequences per step (default: 256 on a GPU, 64 on the CPU)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cache-max-entry-count", a.cache_max_entry_count,
                  "KV cache: < 1 a fraction of the memory free after the weights, >= 1 a number of blocks")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cache-block-seq-len", a.cache_block_seq_len, "tokens per KV block")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_flag("--enable-prefix-caching", a.enable_prefix_caching, "reuse the KV blocks of shared prompt prefixes");
  cmd->add_flag("--eager-mode", a.eager_mode, "launch decode kernels one by one instead of replaying CUDA graphs");
  cmd->add_option("--max-prefill-token-num", a.max_prefill_token_num, "tokens per step (long prompts are chunked)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--quant-policy", a.quant_policy,
                  "KV cache quantization: 0 (none), 8 or 4 (8- or 4-bit codes with a scale and zero point a token "
                  "and KV head)")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 4, 8}));
  cmd->add_option("--model-format", a.model_format,
                  "hf (16-bit, or llama), awq (4-bit AWQ, e.g. LMDeploy's lite auto_awq export), gptq (4-bit "
                  "GPTQ, e.g. a *-GPTQ-Int4 model) or fp8 (a *-FP8 model; dequantized to 16-bit as it loads); "
                  "default: read from config.json")
      ->check(CLI::IsMember({"hf", "llama", "awq", "gptq", "fp8"}));
  cmd->add_option("--hf-overrides", a.hf_overrides,
                  "a JSON object merged into config.json before it is read (nested objects key by key; null removes "
                  "a key), e.g. '{\"max_position_embeddings\": 8192}'");
  cmd->add_option("--rope-scaling-factor", a.rope_scaling_factor,
                  "> 0: dynamic NTK RoPE with this factor in place of config.json's rope_scaling (0: as configured)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--chat-template", a.chat_template, "a built-in template name or a .jinja file (default: the model's own)");
  cmd->add_option("--nnodes", a.nnodes, "nodes in the tensor-parallel group")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--node-rank", a.node_rank, "this node's rank")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--master-addr", a.master_addr, "address of node 0")->capture_default_str();
  cmd->add_option("--master-port", a.master_port, "port of node 0")->capture_default_str()->check(CLI::Range(1, 65535));
}

void check_supported(const EngineArgs& a) {
  comm::ranks_per_node(a.tp, a.nnodes, a.node_rank);  // --tp splits over --nnodes, --node-rank is one of them
}

comm::CommPlan choose_tp_comm(int tp, Device device, bool disable_custom_all_reduce, int nnodes) {
  comm::CommRequest request;
  request.world_size = tp;
  request.nnodes = nnodes;
  request.on_gpu = !device.is_cpu();
  request.disable_custom_all_reduce = disable_custom_all_reduce;
  if (request.on_gpu) {
    request.visible_gpus = backend::cuda_device_count();
    request.same_device = comm::same_device_from_env();
    request.nccl_available = comm::nccl_available();
    request.first_device = device.index;
    request.peer_access = comm::query_peer_access();
  }
  comm::CommPlan plan = comm::choose_comm(request);
  std::string devices;
  for (int d : plan.devices) devices += (devices.empty() ? "cuda:" : ", cuda:") + std::to_string(d);
  log_info("tensor parallelism: {} ranks{}{}{}, {} communicator: {}", tp,
           nnodes > 1 ? fmt::format(" over {} nodes", nnodes) : "", devices.empty() ? "" : ", this node's on ", devices,
           comm::comm_kind_name(plan.kind), plan.reason);
  return plan;
}

Device choose_device(const EngineArgs& a) {
  if (a.backend == "cpu") {
    if (a.device != "auto" && a.device != "cpu") {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--backend cpu contradicts --device {}", a.device),
                  "drop --device, or use --backend turbomind for a GPU");
    }
    return Device::cpu();
  }
  if (a.device == "auto") {
    if (backend::cuda_device_count() > 0) return Device::cuda(0);
    log_warning("no usable CUDA device (this build or machine has none): serving on the CPU");
    return Device::cpu();
  }
  Device device = parse_device(a.device);
  if (!device.is_cpu() && device.index >= backend::cuda_device_count()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--device {}: this machine has {} usable CUDA device(s)", a.device, backend::cuda_device_count()),
                "run `tessera check_env` to see the devices, or use --device cpu");
  }
  return device;
}

namespace {

// Seconds from the environment variable `name`, or `fallback` when unset.
std::chrono::milliseconds seconds_from_env(const char* name, std::chrono::seconds fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(value, &end);
  if (*end != '\0' || !(seconds > 0)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}={}: expected seconds > 0", name, value),
                fmt::format("unset it for the default of {} seconds", fallback.count()));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// TESSERA_COMM_TIMEOUT: how long a rank waits for its peers at one
// collective before the step fails.
std::chrono::milliseconds comm_timeout() { return seconds_from_env("TESSERA_COMM_TIMEOUT", std::chrono::seconds(300)); }

// What every node must run alike; the rendezvous compares it.
std::string node_fingerprint(const EngineArgs& a, const ServingModel& s) {
  const model::ModelSpec& spec = s.spec;
  const char* weights = spec.quantization.awq()    ? "AWQ 4-bit"
                        : spec.quantization.gptq() ? "GPTQ 4-bit"
                        : spec.quantization.fp8()  ? "FP8 weights dequantized to 16-bit"
                                                   : "16-bit weights";
  return fmt::format("{} layers of hidden {}, {} heads ({} KV), vocab {}, {}, {} on {}, KV blocks of {} tokens{}",
                     spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.vocab_size, weights,
                     dtype_name(s.dtype), s.device.is_cpu() ? "CPU" : "GPU", a.cache_block_seq_len,
                     a.quant_policy == 0 ? "" : fmt::format(" in int{}", a.quant_policy));
}

// Several nodes: meets the others at node 0 with this node's KV capacity.
std::shared_ptr<comm::Rendezvous> join_nodes(const EngineArgs& a, const ServingModel& s, int64_t num_blocks) {
  comm::RendezvousOptions options;
  options.master_addr = a.master_addr;
  options.master_port = a.master_port;
  options.nnodes = a.nnodes;
  options.node_rank = a.node_rank;
  options.world_size = a.tp;
  options.fingerprint = node_fingerprint(a, s);
  options.offer = num_blocks;
  options.comm_timeout = comm_timeout();
  // Long by default: the other nodes may still be reading their weights.
  options.timeout = seconds_from_env("TESSERA_RENDEZVOUS_TIMEOUT", std::chrono::seconds(600));
  options.share_nccl_id = !s.device.is_cpu();
  log_info("node {} of {}: meeting the other nodes at {}:{} (waiting up to {:g} s)", a.node_rank, a.nnodes,
           a.master_addr, a.master_port, options.timeout.count() / 1000.0);
  auto nodes = std::make_shared<comm::Rendezvous>(comm::rendezvous(options));
  log_info("node {} of {}: every node joined; this node runs ranks {} .. {} of {}", a.node_rank, a.nnodes,
           nodes->first_rank, nodes->first_rank + static_cast<int>(nodes->links.size()) - 1, a.tp);
  return nodes;
}

}  // namespace

void check_weights_fit_on_gpus(model::ModelSpec spec, DType dtype, int tp, Device device,
                               const comm::CommPlan* plan) {
  if (device.is_cpu()) return;
  model::apply_architecture(spec, model::find_architecture(spec.architecture));  // its biases and head norms
  const size_t share = engine::weight_bytes(spec, dtype, true) / static_cast<size_t>(tp);
  // Ranks sharing one GPU (same-device) share its memory.
  std::map<int, size_t> need;  // device -> the bytes its ranks' shares take
  if (plan == nullptr || plan->devices.empty()) {
    need[device.index] = share;
  } else {
    for (int d : plan->devices) need[d] += share;
  }
  for (const auto& [d, bytes] : need) {
    const backend::CudaDeviceInfo info = backend::cuda_device_info(d);
    engine::check_weights_fit(bytes, info.free_memory, info.total_memory, fmt::format("cuda:{}", d), tp,
                              spec.quantization.kept_four_bit());
  }
}

std::unique_ptr<ServingModel> load_serving_model(const EngineArgs& a) {
  check_supported(a);
  if (a.backend == "pytorch") log_warning("--backend pytorch: tessera has one engine; serving with it");
  auto s = std::make_unique<ServingModel>();
  s->device = choose_device(a);
  s->dtype = backend::choose_compute_dtype(a.dtype, s->device);
  s->tokenizer = text::load_tokenizer(a.model_path);
  if (!a.chat_template.empty()) {
    s->chat_template = text::ChatTemplate::from_option(a.chat_template);
  } else {
    s->chat_template = text::ChatTemplate::find_in_model_dir(a.model_path);
    if (!s->chat_template) {
      log_warning("{} has no chat template: chat prompts are the messages' contents joined ('base'); "
                  "pass --chat-template NAME for a chat model",
                  a.model_path);
      s->chat_template = text::ChatTemplate::builtin("base");
    }
  }
  // config.json as --hf-overrides leaves it (the RoPE factor is logged against it).
  const model::ModelSpec config_spec = model::read_model_spec(a.model_path, {.config_patch = a.hf_overrides});
  model::check_model_format(config_spec, a.model_format, a.model_path);
  const model::SpecOverrides overrides{.rope_scaling_factor = a.rope_scaling_factor, .config_patch = a.hf_overrides};
  if (!a.hf_overrides.empty()) log_info("--hf-overrides: config.json read with {} merged in", a.hf_overrides);
  const backend::KvCacheFormat kv_format = backend::kv_cache_format_for_policy(a.quant_policy);
  if (a.quant_policy != 0) {
    log_info("--quant-policy {0}: the KV cache holds {0}-bit codes with an f32 scale and zero point a token and KV "
             "head",
             a.quant_policy);
  }
  if (a.rope_scaling_factor > 0.0) {
    log_info("--rope-scaling-factor {:g}: RoPE is dynamic NTK over the model's {} trained positions{}; longer "
             "sessions need --session-len",
             a.rope_scaling_factor, config_spec.max_position_embeddings,
             config_spec.rope_scaling.type == model::RopeScalingType::kNone ? ""
                                                                            : ", in place of config.json's rope_scaling");
  }
  log_info("loading {} on {}{}", a.model_path, s->device.to_string(),
           a.tp > 1 ? fmt::format(" as {} tensor-parallel ranks", a.tp) : "");
  std::optional<model::HostModel> host_model;  // tensor parallelism: read once, sharded by the executor
  comm::CommPlan comm_plan;
  if (a.tp > 1) {
    model::check_tp_size(config_spec, a.tp);  // before reading the weights
    comm_plan = choose_tp_comm(a.tp, s->device, a.disable_custom_all_reduce, a.nnodes);
    check_weights_fit_on_gpus(config_spec, s->dtype, a.tp, s->device, &comm_plan);
    host_model = model::read_host_model(a.model_path, overrides);
    s->spec = host_model->spec;
  } else {
    check_weights_fit_on_gpus(config_spec, s->dtype, 1, s->device, nullptr);
    s->backend = s->device.is_cpu() ? backend::make_cpu_backend() : backend::make_cuda_backend(s->device.index, s->dtype);
    s->model = model::load_transformer(a.model_path, *s->backend, overrides);
    s->model->set_kv_cache_format(kv_format);
    s->spec = s->model->spec();
    if (a.eager_mode) s->model->set_graphs_enabled(false);
    if (!s->device.is_cpu()) {
      log_info("decode steps: {}", s->model->graphs_enabled()
                                       ? "CUDA graphs, one per batch-size bucket, recorded at first use (--eager-mode turns them off)"
                                       : "kernels launched one by one (--eager-mode or TESSERA_CUDA_GRAPHS=0)");
    }
  }
  const model::ModelSpec& spec = s->spec;

  const int64_t max_batch_size = a.max_batch_size > 0 ? a.max_batch_size : (s->device.is_cpu() ? 64 : 256);
  // The weights are in memory already: the budget is what is free now plus
  // them (read before the warm-up step, whose memory the pool then keeps).
  const size_t free_now = s->device.is_cpu() ? engine::host_available_memory()
                                             : backend::cuda_device_info(s->device.index).free_memory;
  engine::MemoryPlanInput in;
  in.weight_bytes = engine::weight_bytes(spec, s->dtype, !s->device.is_cpu());  // GPUs keep 4-bit weights packed
  // Loaded on one device: with the second copies of 4-bit linears it made
  // (CUDA on Hopper), which free_now has already lost.
  if (s->backend) in.weight_bytes += s->backend->quantized_copy_bytes();
  // A step's logits rows: one per sequence, plus the prompt rows scored for prompt logprobs.
  const int64_t logits_rows = max_batch_size + engine::kPromptLogitsChunk;
  in.workspace_bytes = engine::workspace_bytes(spec, s->dtype, a.max_prefill_token_num + max_batch_size, logits_rows);
  if (s->model && !s->device.is_cpu()) {
    // On a GPU the workspace is measured: the largest step runs once before
    // the KV cache is sized. (On the CPU such a step of a large model takes
    // minutes, and host memory is not what runs out: the estimate stays.)
    if (auto warmup = engine::measure_workspace(*s->model, a.max_prefill_token_num, logits_rows,
                                                a.cache_block_seq_len)) {
      log_info("workspace measured by a warm-up step of {} tokens and {} logits rows: {:.3f} GiB (estimated {:.3f} GiB)",
               warmup->step_tokens, warmup->logits_rows, warmup->workspace_bytes / double(1ull << 30),
               in.workspace_bytes / double(1ull << 30));
      in.workspace_bytes = warmup->workspace_bytes;
      in.workspace_measured = true;
    }
  }
  in.block_bytes = engine::kv_block_bytes(spec, s->dtype, a.cache_block_seq_len, kv_format);
  in.kv_format = kv_format;
  if (s->model && s->model->graphs_enabled()) {
    in.graph_bytes = engine::decode_graph_bytes(spec, s->dtype, max_batch_size, in.block_bytes);
  }
  in.block_size = a.cache_block_seq_len;
  in.cache_max_entry_count = a.cache_max_entry_count;
  in.session_len = a.session_len > 0 ? a.session_len : std::max<int64_t>(spec.max_position_embeddings, 2);
  in.max_batch_size = max_batch_size;
  in.memory_budget = free_now + in.weight_bytes;
  if (host_model && !s->device.is_cpu()) {
    // GPU ranks: the plan is one rank's (its share of the weights and of each
    // KV block) against its device's free memory, the weights not loaded yet;
    // ranks sharing one GPU (same-device) share its memory.
    const int64_t rank_kv_heads = model::make_tp_shard(spec, 0, a.tp).num_kv_heads;
    in.weight_bytes = in.weight_bytes / static_cast<size_t>(a.tp);
    in.block_bytes = in.block_bytes * static_cast<size_t>(rank_kv_heads) / static_cast<size_t>(spec.num_kv_heads);
    in.memory_budget = comm_plan.kind == comm::CommKind::kSameDevice ? free_now / static_cast<size_t>(a.tp) : free_now;
  }
  if (s->device.is_cpu() && in.cache_max_entry_count < 1.0) {
    // Host memory is shared with everything else: blocks beyond what a full
    // batch of full sessions can use would only take RAM from the system.
    const int64_t useful = max_batch_size * ((in.session_len + in.block_size - 1) / in.block_size);
    const size_t left = in.memory_budget > in.weight_bytes + in.workspace_bytes
                            ? in.memory_budget - in.weight_bytes - in.workspace_bytes : 0;
    if (in.cache_max_entry_count * static_cast<double>(left) / static_cast<double>(in.block_bytes) > useful) {
      log_info("CPU: the KV cache is capped at {} blocks ({} full sessions of {} tokens)", useful, max_batch_size,
               in.session_len);
      in.cache_max_entry_count = static_cast<double>(useful);
    }
  }
  s->plan = engine::plan_memory(in);
  std::shared_ptr<comm::Rendezvous> nodes;
  if (a.nnodes > 1) {
    nodes = join_nodes(a, *s, s->plan.num_blocks);
    if (nodes->agreed_offer < s->plan.num_blocks) {
      log_info("KV cache: {} blocks, the most every node can hold (this node could hold {})", nodes->agreed_offer,
               s->plan.num_blocks);
      in.cache_max_entry_count = static_cast<double>(nodes->agreed_offer);
      s->plan = engine::plan_memory(in);
    }
  }

  engine::EngineConfig config;
  config.scheduler.max_batch_size = max_batch_size;
  config.scheduler.max_num_batched_tokens = a.max_prefill_token_num;
  log_info("scheduler: up to {} sequences and {} tokens a step (longer prompts are chunked)", max_batch_size,
           a.max_prefill_token_num);
  config.block_size = a.cache_block_seq_len;
  config.num_blocks = s->plan.num_blocks;
  config.session_len = s->plan.session_len;
  config.enable_prefix_caching = a.enable_prefix_caching;
  config.eos_ids = spec.eos_token_ids;
  if (config.eos_ids.empty() && s->tokenizer->eos_id()) config.eos_ids.push_back(*s->tokenizer->eos_id());
  std::unique_ptr<engine::Executor> executor;
  if (host_model) {
    engine::TpExecutorConfig tp_config;
    tp_config.tp = a.tp;
    tp_config.num_blocks = config.num_blocks;
    tp_config.block_size = config.block_size;
    tp_config.kv_cache_format = kv_format;
    tp_config.comm_plan = comm_plan;
    tp_config.compute_dtype = s->dtype;
    if (!s->device.is_cpu()) {
      // The plan was made before the ranks load: what it gave the KV cache
      // and the steps stays free of optional weight copies (ranks sharing one
      // GPU share its memory).
      const size_t ranks_per_device = comm_plan.kind == comm::CommKind::kSameDevice ? static_cast<size_t>(a.tp) : 1;
      tp_config.memory_after_weights = (s->plan.kv_bytes + in.workspace_bytes + in.graph_bytes) * ranks_per_device;
    }
    tp_config.nodes = nodes;
    tp_config.comm_timeout = comm_timeout();
    auto tp_executor = std::make_unique<engine::TpExecutor>(*host_model, tp_config);
    if (a.node_rank > 0) {
      s->follower = std::move(tp_executor);  // runs node 0's steps; no engine here
      return s;
    }
    executor = std::move(tp_executor);
  } else {
    executor = std::make_unique<engine::CpuExecutor>(*s->model, config.num_blocks, config.block_size);
  }
  s->engine = std::make_unique<engine::Engine>(config, std::move(executor));
  return s;
}

}  // namespace tessera::cli
