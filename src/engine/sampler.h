// Sampler: one token from one row of logits, for one request.
//
// Each request owns its Sampler, and with it its random generator (seeded by
// SamplingParams::seed), so a request samples the same tokens alone or in any
// batch: the generator advances only on that request's own draws.
//
// Processing order (the "processed distribution"):
//   1. repetition_penalty (HF): over the ids in prompt + output, a positive
//      logit is divided by the penalty and a negative one multiplied;
//   2. presence / frequency penalties (OpenAI): over the output ids,
//      logit -= presence * [count > 0] + frequency * count;
//   3. logit_bias (OpenAI) is added; masked ids (eos and stop ids before
//      min_tokens, and ids a structured output's constraint does not allow)
//      become -inf;
//   4. temperature: greedy (argmax, lowest id on a tie) when 0, else logits / T;
//   5. truncation: top_k, then top_p (the smallest set of likeliest tokens whose
//      probability reaches top_p), then min_p (prob >= min_p * max prob);
//   6. a draw from the renormalised probabilities, in id order, at one number
//      of the request's generator (next_uniform(), drawn once per sample at
//      temperature > 0): a device that samples the row (backend/row_sampling.h)
//      is given the same number and so picks the same token.
// Logprobs are the log-softmax after steps 1-4 (penalties, masks and
// temperature; T = 1 when greedy), before truncation — so they describe the
// distribution the token was drawn from, and tokens cut by top_k/top_p still
// get a finite value.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "backend/row_sampling.h"

namespace tessera::engine {

struct SamplingParams {
  float temperature = 0.0f;          // 0: greedy
  uint64_t seed = 0;
  int32_t top_k = 0;                 // <= 0: off
  float top_p = 1.0f;                // (0, 1]; 1: off
  float min_p = 0.0f;                // [0, 1]; 0: off
  float repetition_penalty = 1.0f;   // > 0; 1: off
  float presence_penalty = 0.0f;     // [-2, 2] as OpenAI; 0: off
  float frequency_penalty = 0.0f;    // [-2, 2] as OpenAI; 0: off
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) added to the logit
  // after the penalties, before masks and temperature; ids unique.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// Throws Error(kInvalidArgument) naming the field when a value is out of range.
void validate(const SamplingParams& params);

// Whether these parameters leave the logits as they are and take their argmax
// (temperature 0, no penalties, no logit_bias): with no masks and no logprobs
// asked, a sample is then the argmax alone, which a device can take.
bool takes_plain_argmax(const SamplingParams& params);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// What the sampler needs besides the logits.
struct SampleInputs {
  std::span<const int32_t> prompt;   // for repetition_penalty
  std::span<const int32_t> output;   // tokens generated so far: penalties
  std::span<const int32_t> masked;   // ids that must not be sampled now
  bool logprobs = false;             // fill SampleResult::logprob
  int32_t top_logprobs = 0;          // and this many of the likeliest tokens
  // Structured output: bit id (word id / 64) set for each id that may be
  // sampled, every other id masked; empty: no such mask.
  std::span<const uint64_t> allowed = {};
};

// A token of a prompt as the model scored it: its logprob under the raw
// logits (no sampling parameter applied) and the likeliest alternatives.
struct PromptTokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;  // likeliest first, lowest id on a tie
};
PromptTokenLogprob model_logprob(std::span<const float> logits, int32_t token, int32_t top);

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;                    // when requested
  std::vector<TokenLogprob> top_logprobs;  // likeliest first, lowest id on a tie
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  // logits [vocab] f32; no history, no masks, no logprobs.
  int32_t sample(const float* logits, int64_t vocab) { return sample(std::span<const float>(logits, vocab), {}).token; }
  SampleResult sample(std::span<const float> logits, const SampleInputs& inputs);

  const SamplingParams& params() const { return params_; }

  // The next number of this request's generator, uniform in [0, 1): what a
  // sample at temperature > 0 draws at. A device sampling this request's row
  // takes it from here instead, so the generator advances the same way.
  double next_uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

  // This request's row of a device sample (backend/row_sampling.h): its
  // parameters, and the next uniform where a draw needs one.
  backend::SamplingRow device_row();

 private:
  // One token of the processed logits x (temperature applied) by truncation
  // and a draw; log_total is log Σ exp(x), needed only when top_p < 1.
  int32_t draw(const std::vector<float>& x, double log_total);

  SamplingParams params_;
  std::mt19937_64 rng_;
};

int32_t argmax(const float* values, int64_t count);

// Steps 1-3 above as one edit per token id they touch (ids outside [0, vocab)
// dropped), for logits row `row`: what a device applies before sampling.
std::vector<backend::LogitEdit> logit_edits(const SamplingParams& params, const SampleInputs& inputs, int64_t vocab,
                                            int32_t row = 0);

// The same edits, in place on `logits` [vocab] (exposed for tests).
void apply_penalties_and_masks(std::vector<float>& logits, const SamplingParams& params, const SampleInputs& inputs);

}  // namespace tessera::engine
