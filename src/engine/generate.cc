#include "engine/generate.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace tessera::engine {

namespace {

// The one row of a device sample, with the penalties as edits of its logits.
backend::SamplingBatch device_sampling(Sampler& sampler, const SampleInputs& inputs, int64_t vocab) {
  backend::SamplingBatch batch;
  if (!takes_plain_argmax(sampler.params())) batch.edits = logit_edits(sampler.params(), inputs, vocab, 0);
  batch.rows.push_back(sampler.device_row());
  return batch;
}

}  // namespace

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

  // Block tables grow with the sequence, as the engine's do: a table as long
  // as the whole generation would make every step plan its attention for the
  // longest context.
  model::ForwardBatch batch = model::sequence_batch(prompt, 0, block_size);

  Sampler sampler(options.sampling);
  GenerateResult result;
  int32_t position = static_cast<int32_t>(prompt.size());
  while (static_cast<int64_t>(result.tokens.size()) < options.max_new_tokens) {
    SampleInputs inputs;
    inputs.prompt = prompt;
    inputs.output = result.tokens;
    int32_t token = 0;
    if (model.samples_on_device()) {
      // Sampled where the logits are, as the engine's steps are: only the id
      // crosses to the host, not a row of the vocabulary's logits.
      token = model.forward_sample(batch, cache, device_sampling(sampler, inputs, model.spec().vocab_size))[0];
    } else {
      Tensor logits = model.forward(batch, cache);  // [1, vocab]
      token = sampler.sample({logits.data<float>(), static_cast<size_t>(logits.dim(1))}, inputs).token;
    }
    result.tokens.push_back(token);
    if (on_token) on_token(token);
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end()) {
      result.finish_reason = FinishReason::kStop;
      break;
    }
    batch = model::sequence_batch({token}, position++, block_size);
  }
  return result;
}

}  // namespace tessera::engine
