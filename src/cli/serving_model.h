// What `serve api_server` and `chat` share: LMDeploy's engine flags, and the
// start-up that turns them into a running engine (backend → weights → memory
// plan → KV cache → engine) with its tokenizer and chat template.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "comm/comm_plan.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine/tp_executor.h"
#include "model/transformer.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tessera::cli {

struct EngineArgs {
  std::string model_path;
  std::string backend = "turbomind";  // turbomind (the GPU), pytorch (accepted, same engine), cpu
  std::string device = "auto";        // auto, cpu, cuda, cuda:N
  std::string dtype = "auto";
  int tp = 1;                         // > 1: ranks as threads, one GPU each (or CPU ranks), over every node
  bool disable_custom_all_reduce = false;  // NCCL for every collective
  int64_t session_len = 0;            // 0: the model's max_position_embeddings
  int64_t max_batch_size = 0;         // 0: 256 on a GPU, 64 on the CPU
  double cache_max_entry_count = 0.8;
  int64_t cache_block_seq_len = 64;
  bool enable_prefix_caching = false;
  bool eager_mode = false;            // no CUDA graphs for decode steps
  int64_t max_prefill_token_num = 8192;
  int quant_policy = 0;
  std::string model_format;            // hf, awq (gptq, fp8 refused); empty: from config.json
  double rope_scaling_factor = 0.0;
  std::string hf_overrides;  // a JSON object merged into config.json (SpecOverrides::config_patch)
  std::string chat_template;          // a built-in name or a .jinja file; empty: the model's own
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// Registers the engine flags (LMDeploy's names and defaults) on `cmd`.
void add_engine_options(CLI::App* cmd, EngineArgs& args);

// Everything a running model needs; destroyed in reverse order (the engine
// stops before the model it runs).
struct ServingModel {
  Device device;
  DType dtype = DType::kF32;
  model::ModelSpec spec;
  std::unique_ptr<backend::Backend> backend;        // with --tp 1 (the ranks own theirs otherwise)
  std::unique_ptr<model::Transformer> model;        // with --tp 1
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::optional<text::ChatTemplate> chat_template;
  engine::MemoryPlan plan;
  std::unique_ptr<engine::Engine> engine;        // node 0 (every run of one node)
  std::unique_ptr<engine::TpExecutor> follower;  // a worker node (--node-rank > 0): runs node 0's steps
};

// Throws Error(kUnsupported) with a hint for flags whose features do not exist yet.
void check_supported(const EngineArgs& args);

// Refuses what is not supported yet with Error(kUnsupported) and a hint, then
// loads. Throws Error for a bad model directory, a device problem or a memory
// plan that does not fit. With --nnodes > 1 it meets the other nodes at node 0
// (comm/tcp_rendezvous.h) once the weights are read; node 0 gets the engine,
// a worker node the follower that runs node 0's steps.
std::unique_ptr<ServingModel> load_serving_model(const EngineArgs& args);

// The communicator plan of `tp` ranks over `nnodes` nodes, this node's
// starting at `device` (comm::choose_comm with this machine's GPUs, peer
// access, NCCL and TESSERA_TP_SAME_DEVICE).
comm::CommPlan choose_tp_comm(int tp, Device device, bool disable_custom_all_reduce, int nnodes = 1);

// Before the weights are read: each GPU rank's share of them must fit in its
// device's free memory (engine::check_weights_fit). `plan`: the ranks'
// devices at tp > 1 (null at tp 1: `device` alone). `spec`: config.json as
// it loads (with --hf-overrides). Nothing to check on the CPU.
void check_weights_fit_on_gpus(model::ModelSpec spec, DType dtype, int tp, Device device,
                               const comm::CommPlan* plan);

// The device the flags mean: --backend cpu or --device cpu → the CPU; a GPU
// backend with no GPU present falls back to the CPU with a warning unless a
// CUDA device was named explicitly.
Device choose_device(const EngineArgs& args);

}  // namespace tessera::cli
