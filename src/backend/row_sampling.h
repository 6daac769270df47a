// Sampling rows of logits where they are (a device backend: on the device, so
// a batch's logits — 95 MB per step at 256 rows of a 92k vocabulary — never
// cross to the host; only the ids do).
//
// The contract is engine::Sampler's (engine/sampler.h), which is its
// reference: the edits are its steps 1-3 per token id, then temperature,
// truncation to the first K tokens of the order "likeliest first, lowest id on
// a tie" (K the smallest of top_k, top_p's count and min_p's count), and one
// draw by inverse transform over the kept tokens in id order at `uniform`,
// the number the request's own generator gave (Sampler::next_uniform). The
// same uniform gives the same token, up to the rounding of the sums (the
// device sums fixed-point weights, the host doubles).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace tessera::backend {

struct SamplingRow {
  float temperature = 0.0f;  // 0: argmax (lowest id on a tie), nothing else read
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  double uniform = 0.0;      // [0, 1): where the draw lands
};

// One token id's change to one row's logits before sampling, applied as the
// Sampler does: repetition penalty (a positive logit divided, a negative one
// multiplied; 1: none), then `penalty` subtracted (presence + frequency ·
// count), then `bias` added (logit_bias), then -inf where `masked`. Ids are
// unique within a row.
struct LogitEdit {
  int32_t row = 0;
  int32_t id = 0;
  float repetition_penalty = 1.0f;
  float penalty = 0.0f;
  float bias = 0.0f;
  int32_t masked = 0;  // 0 or 1 (an int, so the struct has no padding to upload)
};

struct SamplingBatch {
  std::vector<SamplingRow> rows;  // one per logits row
  std::vector<LogitEdit> edits;   // any order
  // Structured output, after the edits: the rows whose ids are limited to a
  // set, each set as ceil(vocab / 64) words of bits (bit id % 64 of word
  // id / 64), one run a row in `allowed_rows`' order; an id whose bit is
  // clear becomes -inf, as the Sampler's SampleInputs::allowed does.
  std::vector<int32_t> allowed_rows;
  std::vector<uint64_t> allowed;
  // Where set, the sampler calls it for `allowed` instead, as late as it
  // can (after the step's forward is launched): the engine works the sets out
  // while the device runs the forward.
  std::function<void(std::vector<uint64_t>& allowed)> make_allowed;
};

}  // namespace tessera::backend
