#include "engine/warmup.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace tessera::engine {

std::optional<WarmupResult> measure_workspace(model::Transformer& model, int64_t step_tokens, int64_t logits_rows,
                                              int64_t block_size) {
  backend::Backend& backend = model.backend();
  Allocator& allocator = backend.allocator();
  if (!allocator.usage()) return std::nullopt;
  const model::ModelSpec& spec = model.spec();
  step_tokens = std::max<int64_t>(1, step_tokens);
  logits_rows = std::clamp<int64_t>(logits_rows, 1, step_tokens);
  std::vector<int32_t> tokens(step_tokens);
  for (int64_t i = 0; i < step_tokens; ++i) tokens[i] = static_cast<int32_t>((i * 7919 + 3) % spec.vocab_size);
  const model::ForwardBatch batch = model::sequence_batch(std::move(tokens), 0, block_size, logits_rows);
  const int64_t blocks = batch.attention.max_blocks_per_seq;

  try {
    std::optional<WarmupResult> result;
    {
      backend::PagedKvCache cache = model.allocate_cache(blocks, block_size);  // not the workspace: before the count
      backend.synchronize();
      allocator.reset_peak();
      const std::optional<Allocator::Usage> before = allocator.usage();
      Tensor logits = model.forward(batch, cache);  // host logits included where the backend is the host
      backend.synchronize();
      const std::optional<Allocator::Usage> after = allocator.usage();
      if (before && after) {
        result = WarmupResult{std::max(after->peak, before->in_use) - before->in_use, step_tokens, logits_rows};
      }
    }
    // The scratch cache and the activations go back to the device, for the KV cache.
    allocator.release_unused();
    return result;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kOutOfMemory) throw;
    throw Error(ErrorKind::kOutOfMemory,
                fmt::format("the warm-up forward of the largest step ({} tokens, {} logits rows) does not fit next to "
                            "the weights: {}",
                            step_tokens, logits_rows, e.message()),
                "lower --max-prefill-token-num or --max-batch-size, or use a GPU with more memory (or --tp)");
  }
}

}  // namespace tessera::engine
