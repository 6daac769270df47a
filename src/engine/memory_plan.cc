#include "engine/memory_plan.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "model/decode_graphs.h"

namespace tessera::engine {
namespace {

constexpr const char* kFlagsHint =
    "lower --max-batch-size (a smaller workspace), raise --cache-max-entry-count (a larger share, or a block "
    "count), or lower --session-len; or use a smaller model";

std::string gib(size_t bytes) { return fmt::format("{:.3f} GiB", static_cast<double>(bytes) / (1ull << 30)); }

// The forward's live activations per token, in elements: residual, normed,
// qkv, attention out, o out, gate_up, silu·mul.
int64_t activation_elements_per_token(const model::ModelSpec& s) {
  return 4 * s.hidden_size + s.qkv_size() + s.q_size() + 3 * s.intermediate_size;
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  TESSERA_CHECK(in.block_bytes > 0 && in.block_size > 0);
  if (!(in.cache_max_entry_count > 0.0)) {
    throw Error(ErrorKind::kInvalidArgument, "--cache-max-entry-count must be positive", kFlagsHint);
  }
  const size_t used = in.weight_bytes + in.workspace_bytes + in.graph_bytes;
  const size_t left = in.memory_budget > used ? in.memory_budget - used : 0;
  MemoryPlan plan;
  if (in.cache_max_entry_count < 1.0) {
    plan.num_blocks = static_cast<int64_t>(in.cache_max_entry_count * static_cast<double>(left) /
                                           static_cast<double>(in.block_bytes));
  } else {
    plan.num_blocks = static_cast<int64_t>(in.cache_max_entry_count);
    if (static_cast<size_t>(plan.num_blocks) * in.block_bytes > left) {
      throw Error(ErrorKind::kOutOfMemory,
                  fmt::format("{} KV blocks need {}, but only {} of the {} budget is left after weights ({}), "
                              "workspace ({}) and decode graphs ({})",
                              plan.num_blocks, gib(plan.num_blocks * in.block_bytes), gib(left),
                              gib(in.memory_budget), gib(in.weight_bytes), gib(in.workspace_bytes),
                              gib(in.graph_bytes)),
                  "lower --cache-max-entry-count (a block count when >= 1, a fraction of free memory when < 1)");
    }
  }
  if (plan.num_blocks < 1) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("not one KV block ({}) fits: budget {}, weights {}, workspace {}, decode graphs {}, left {}, "
                            "cache_max_entry_count {}",
                            gib(in.block_bytes), gib(in.memory_budget), gib(in.weight_bytes), gib(in.workspace_bytes),
                            gib(in.graph_bytes), gib(left), in.cache_max_entry_count),
                in.graph_bytes > 0 ? std::string(kFlagsHint) + "; --eager-mode frees the decode graphs' memory"
                                   : std::string(kFlagsHint));
  }
  plan.kv_bytes = static_cast<size_t>(plan.num_blocks) * in.block_bytes;
  plan.tokens_that_fit = plan.num_blocks * in.block_size;
  plan.session_len = in.session_len;
  if (plan.session_len <= 0 || plan.session_len > plan.tokens_that_fit) {
    if (plan.session_len > plan.tokens_that_fit) {
      log_warning("--session-len {} does not fit the KV cache ({} tokens); truncated to {}", in.session_len,
                  plan.tokens_that_fit, plan.tokens_that_fit);
      plan.session_len_truncated = true;
    }
    plan.session_len = plan.tokens_that_fit;
  }
  std::ostringstream t;
  t << fmt::format("memory plan (budget {}):\n", gib(in.memory_budget));
  t << fmt::format("  {:<28} {:>14}\n", "weights", gib(in.weight_bytes));
  t << fmt::format("  {:<28} {:>14}   {}\n", "workspace (largest step)", gib(in.workspace_bytes),
                   in.workspace_measured ? "measured by a warm-up step" : "estimated from the shapes");
  if (in.graph_bytes > 0) t << fmt::format("  {:<28} {:>14}\n", "decode graphs", gib(in.graph_bytes));
  t << fmt::format("  {:<28} {:>14}   {} blocks x {} tokens, {} per block\n",
                   in.kv_format == backend::KvCacheFormat::kCompute
                       ? std::string("KV cache")
                       : fmt::format("KV cache ({})", backend::kv_cache_format_name(in.kv_format)),
                   gib(plan.kv_bytes), plan.num_blocks, in.block_size, gib(in.block_bytes));
  t << fmt::format("  {:<28} {:>14}\n", "tokens that fit", plan.tokens_that_fit);
  t << fmt::format("  {:<28} {:>14}{}\n", "session length", plan.session_len,
                   plan.session_len_truncated ? "   (truncated)" : "");
  t << fmt::format("  {:<28} {:>14}", "full sessions at once", plan.tokens_that_fit / plan.session_len);
  plan.table = t.str();
  log_info("{}", plan.table);
  return plan;
}

size_t weight_bytes(const model::ModelSpec& s, DType dtype, bool packed) {
  const int64_t linear = s.linear_params_per_layer();
  // Norms and biases, per layer.
  const int64_t unpacked = 2 * s.hidden_size + (s.qkv_bias ? s.qkv_size() : 0) + (s.head_norms ? 2 * s.head_dim : 0);
  int64_t total = s.num_layers * unpacked + s.vocab_size * s.hidden_size + s.hidden_size;
  if (!s.tie_word_embeddings) total += s.vocab_size * s.hidden_size;
  const bool four_bit = packed && s.quantization.kept_four_bit() && s.quantization.group_size > 0;
  if (!four_bit) return dtype_bytes(dtype, static_cast<size_t>(total + s.num_layers * linear));
  const int64_t packed_bytes = s.num_layers * s.quantization.packed_bytes(linear);
  return dtype_bytes(dtype, static_cast<size_t>(total)) + static_cast<size_t>(packed_bytes);
}

void check_weights_fit(size_t rank_weight_bytes, size_t free_bytes, size_t total_bytes, const std::string& device,
                       int tp, bool four_bit) {
  const size_t usable = free_bytes - free_bytes / 50;
  if (rank_weight_bytes <= usable) return;
  std::string hint = fmt::format("run with --tp {} or more (the ranks share the weights)", 2 * tp);
  if (!four_bit) hint += ", serve a 4-bit AWQ export of the model (about a quarter of the bytes)";
  if (total_bytes > free_bytes + free_bytes / 10) {
    hint += fmt::format(", or free {}: other processes hold {} of it", device, gib(total_bytes - free_bytes));
  }
  throw Error(ErrorKind::kOutOfMemory,
              fmt::format("the weights take {}{} but {} has {} free of {}: they do not fit before any KV cache",
                          gib(rank_weight_bytes), tp > 1 ? fmt::format(" a rank (1/{} of them)", tp) : "", device,
                          gib(free_bytes), gib(total_bytes)),
              hint);
}

size_t kv_block_bytes(const model::ModelSpec& s, DType dtype, int64_t block_size, backend::KvCacheFormat format) {
  const auto rows = static_cast<size_t>(2 * s.num_layers * s.num_kv_heads * block_size);  // keys and values
  if (const int bits = backend::kv_code_bits(format); bits != 0) {
    return rows * (dtype_bytes(bits == 8 ? DType::kU8 : DType::kU4, static_cast<size_t>(s.head_dim)) +
                   2 * sizeof(float));
  }
  return dtype_bytes(dtype, rows * static_cast<size_t>(s.head_dim));
}

size_t workspace_bytes(const model::ModelSpec& s, DType dtype, int64_t max_step_tokens, int64_t max_batch_size) {
  // The activations of every token, plus the logits rows and their host copy.
  return dtype_bytes(dtype, static_cast<size_t>(max_step_tokens * activation_elements_per_token(s))) +
         2 * sizeof(float) * static_cast<size_t>(max_batch_size * s.vocab_size);
}

size_t decode_graph_bytes(const model::ModelSpec& s, DType dtype, int64_t max_batch_size, size_t block_bytes) {
  const int64_t largest = model::decode_graph_batch_bucket(std::min(max_batch_size, model::DecodeGraphs::kMaxSequences));
  return sizeof(float) * static_cast<size_t>(largest * s.vocab_size) +
         dtype_bytes(dtype, static_cast<size_t>(largest * activation_elements_per_token(s))) + block_bytes;
}

size_t host_available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

}  // namespace tessera::engine
