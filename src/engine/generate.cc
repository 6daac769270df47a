#include "engine/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace tessera::engine {

GenerateResult generate(model::Transformer& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw Error(ErrorKind::kInvalidArgument, "the prompt has no tokens", "give a non-empty prompt");
  const int64_t limit = model.spec().max_position_embeddings;
  const int64_t total = static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  if (model.spec().rope_scaling.type == model::RopeScalingType::kNone && total > limit) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("prompt ({} tokens) plus max tokens ({}) exceeds the model's context of {} tokens",
                            prompt.size(), options.max_new_tokens, limit),
                "shorten the prompt or lower --max-tokens");
  }
  const int64_t block_size = options.block_size;
  const int64_t num_blocks = (total + block_size - 1) / block_size;
  backend::PagedKvCache cache = model.allocate_cache(num_blocks, block_size);

  model::ForwardBatch batch;
  // The blocks that hold positions [0, length), as the engine's tables grow:
  // a table as long as the whole generation would make every step plan its
  // attention for the longest context.
  auto cover = [&](int64_t length) {
    const int64_t blocks = (length + block_size - 1) / block_size;
    batch.attention.max_blocks_per_seq = static_cast<int32_t>(blocks);
    batch.attention.block_tables.resize(blocks);
    std::iota(batch.attention.block_tables.begin(), batch.attention.block_tables.end(), 0);
  };
  cover(static_cast<int64_t>(prompt.size()));
  batch.token_ids = prompt;
  batch.attention.positions.resize(prompt.size());
  std::iota(batch.attention.positions.begin(), batch.attention.positions.end(), 0);
  batch.attention.query_start = {0, static_cast<int32_t>(prompt.size())};
  batch.logit_rows = {static_cast<int32_t>(prompt.size()) - 1};

  Sampler sampler(options.sampling);
  GenerateResult result;
  int32_t position = static_cast<int32_t>(prompt.size());
  while (static_cast<int64_t>(result.tokens.size()) < options.max_new_tokens) {
    Tensor logits = model.forward(batch, cache);  // [1, vocab]
    SampleInputs inputs;
    inputs.prompt = prompt;
    inputs.output = result.tokens;
    const int32_t token =
        sampler.sample({logits.data<float>(), static_cast<size_t>(logits.dim(1))}, inputs).token;
    result.tokens.push_back(token);
    if (on_token) on_token(token);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end()) {
      result.finish_reason = FinishReason::kStop;
      break;
    }
    batch.token_ids = {token};
    cover(int64_t{position} + 1);
    batch.attention.positions = {position++};
    batch.attention.query_start = {0, 1};
    batch.logit_rows = {0};
  }
  return result;
}

}  // namespace tessera::engine
