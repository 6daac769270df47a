#include "engine/cpu_executor.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace tessera::engine {

CpuExecutor::CpuExecutor(model::Transformer& model, int64_t num_blocks, int64_t block_size)
    : model_(model), cache_(model.allocate_cache(num_blocks, block_size)), device_sampling_(device_sampling_wanted(model)) {}

bool device_sampling_wanted(const model::Transformer& model) {
  const char* setting = std::getenv("TESSERA_GPU_SAMPLING");
  return model.samples_on_device() && !(setting != nullptr && std::string(setting) == "0");
}

model::ForwardBatch make_forward_batch(const StepPlan& plan) {
  model::ForwardBatch batch;
  auto& attention = batch.attention;
  size_t max_blocks = 1;
  for (const auto& c : plan.chunks) max_blocks = std::max(max_blocks, c.block_table.size());
  attention.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
  attention.query_start = {0};
  for (const auto& c : plan.chunks) {
    for (size_t i = 0; i < c.token_ids.size(); ++i) {
      batch.token_ids.push_back(c.token_ids[i]);
      attention.positions.push_back(c.start_position + static_cast<int32_t>(i));
    }
    attention.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
    const auto end = static_cast<int32_t>(batch.token_ids.size());
    for (int32_t row = end - static_cast<int32_t>(c.num_logit_rows()); row < end; ++row) batch.logit_rows.push_back(row);
    std::vector<int32_t> row = c.block_table;
    row.resize(max_blocks, 0);
    attention.block_tables.insert(attention.block_tables.end(), row.begin(), row.end());
  }
  return batch;
}

StepOutput CpuExecutor::execute(const StepPlan& plan) {
  model::ForwardBatch batch = make_forward_batch(plan);
  if (batch.logit_rows.empty()) {
    // Only prefill chunks this step: the forward still wants one logits row; drop it.
    batch.logit_rows = {0};
    model_.forward(batch, cache_);
    return {};
  }
  // Sampled on the device: only the ids come back.
  if (plan.device_sampling) {
    StepOutput out;
    out.token_ids = model_.forward_sample(batch, cache_, *plan.device_sampling);
    return out;
  }
  StepOutput out;
  out.logits = model_.forward(batch, cache_);
  return out;
}

}  // namespace tessera::engine
