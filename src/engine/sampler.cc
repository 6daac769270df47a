#include "engine/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "core/error.h"

namespace tessera::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void require(bool ok, const char* field, const std::string& what) {
  if (!ok) throw Error(ErrorKind::kInvalidArgument, fmt::format("{} {}", field, what), "change the sampling parameter");
}

// Ids ordered likeliest first, lowest id on a tie.
bool likelier(std::span<const float> x, int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); }

// A larger logit, a larger key: the float's bits with the sign flipped (and
// all of them for negatives); -0 and +0 one key, as they compare equal.
uint32_t order_key(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v == 0.0f ? 0.0f : v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// The likeliest ids of x in slices, likeliest first, lowest id on a tie:
// each slice selected from the ids not given yet and sorted alone, so none
// is ranked twice. Over 64-bit keys, the logit's order-preserving bits above
// the id's complement: one integer comparison gives the order, and the
// selection compares neighbours in memory, not ids that index x.
class LikeliestSlices {
 public:
  explicit LikeliestSlices(std::span<const float> x) : keys_(x.size()) {
    for (size_t i = 0; i < x.size(); ++i) {
      keys_[i] = (uint64_t{order_key(x[i])} << 32) | (0xffffffffu - static_cast<uint32_t>(i));
    }
  }
  // Appends the next `count` likeliest ids (fewer at the end) to `ids`.
  void next(size_t count, std::vector<int32_t>& ids) {
    const auto begin = keys_.begin() + static_cast<std::ptrdiff_t>(given_);
    const size_t end = std::min(keys_.size(), given_ + count);
    const auto last = keys_.begin() + static_cast<std::ptrdiff_t>(end);
    if (end < keys_.size()) std::nth_element(begin, last, keys_.end(), std::greater<>());
    std::sort(begin, last, std::greater<>());
    for (auto it = begin; it != last; ++it) ids.push_back(static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(*it)));
    given_ = end;
  }
  bool done() const { return given_ == keys_.size(); }

 private:
  std::vector<uint64_t> keys_;
  size_t given_ = 0;
};

// The `count` likeliest ids of x, likeliest first, lowest id on a tie. A
// truncation keeps a few tokens of a vocabulary of 10^5, so the common case
// is one pass with a small heap (an id enters only past the heap's worst,
// which soon happens rarely); larger counts select over LikeliestSlices'
// keys.
std::vector<int32_t> top_ids(std::span<const float> x, size_t count) {
  const size_t vocab = x.size();
  count = std::min(count, vocab);
  auto better = [&](int32_t a, int32_t b) { return likelier(x, a, b); };
  std::vector<int32_t> ids;
  if (count == 0) return ids;
  constexpr size_t kHeapLimit = 1024;
  if (count <= kHeapLimit && count * 8 < vocab) {
    // A max-heap under `better` keeps its worst id on top (front).
    ids.resize(count);
    std::iota(ids.begin(), ids.end(), 0);
    std::make_heap(ids.begin(), ids.end(), better);
    for (size_t i = count; i < vocab; ++i) {
      // Ids arrive in increasing order, so an equal value never beats the worst.
      if (x[i] > x[ids.front()]) {
        std::pop_heap(ids.begin(), ids.end(), better);
        ids.back() = static_cast<int32_t>(i);
        std::push_heap(ids.begin(), ids.end(), better);
      }
    }
    std::sort(ids.begin(), ids.end(), better);
    return ids;
  }
  LikeliestSlices slices(x);
  slices.next(count, ids);
  return ids;
}

// e^t for t <= 0 within 1e-7 relative (2^k · e^f with |f| <= ln2 / 2, e^f by
// its Taylor polynomial to degree 7; below -87, where e^t is under 2^-125,
// the value of -87). Written here because libm's expf is one call per element
// that the compiler cannot vectorise (about 3 ns, so 0.3 ms of every top_p
// row of a 92,544-token vocabulary), and glibc's vector variants need
// -ffast-math, which would let the compiler assume no -inf (masked tokens
// have it). sampler.cc is compiled with -fno-trapping-math so the clamp
// below becomes a vector select.
inline float exp_nonpositive(float t) {
  t = t < -87.0f ? -87.0f : t;
  const float k = (t * 1.44269504088896341f + 12582912.0f) - 12582912.0f;     // round(t / ln2)
  const float f = (t - k * 0.693145751953125f) - k * 1.428606765330187045e-06f;  // t - k ln2 in two parts
  float p = 1.0f / 5040.0f;
  p = p * f + 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);  // · 2^k
}

// log Σ exp(x), summed in double (entries may be -inf; all -inf gives -inf).
double log_sum_exp(std::span<const float> x) {
  const float max_value = *std::max_element(x.begin(), x.end());
  if (max_value == kNegInf) return -std::numeric_limits<double>::infinity();
  constexpr size_t kChunk = 256;  // exps of a chunk in one vectorised pass, then their sum
  float terms[kChunk];
  double sums[4] = {0.0, 0.0, 0.0, 0.0};
  for (size_t begin = 0; begin < x.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, x.size() - begin);
    for (size_t i = 0; i < n; ++i) terms[i] = exp_nonpositive(x[begin + i] - max_value);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
      sums[0] += terms[i];
      sums[1] += terms[i + 1];
      sums[2] += terms[i + 2];
      sums[3] += terms[i + 3];
    }
    for (; i < n; ++i) sums[0] += terms[i];
  }
  return std::log((sums[0] + sums[1]) + (sums[2] + sums[3])) + max_value;
}

}  // namespace

PromptTokenLogprob model_logprob(std::span<const float> x, int32_t token, int32_t top) {
  const double log_total = log_sum_exp(x);
  PromptTokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(static_cast<double>(x[static_cast<size_t>(token)]) - log_total);
  for (int32_t id : top_ids(x, static_cast<size_t>(std::max<int32_t>(0, top)))) {
    out.top_logprobs.push_back({id, static_cast<float>(static_cast<double>(x[static_cast<size_t>(id)]) - log_total)});
  }
  return out;
}

void validate(const SamplingParams& p) {
  require(std::isfinite(p.temperature) && p.temperature >= 0.0f, "temperature", "must be >= 0");
  require(p.top_p > 0.0f && p.top_p <= 1.0f, "top_p", "must be in (0, 1]");
  require(p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p", "must be in [0, 1]");
  require(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f, "repetition_penalty", "must be > 0");
  require(std::isfinite(p.presence_penalty), "presence_penalty", "must be finite");
  require(std::isfinite(p.frequency_penalty), "frequency_penalty", "must be finite");
  for (const auto& [id, bias] : p.logit_bias) {
    require(id >= 0, "logit_bias", fmt::format("token id {} must be >= 0", id));
    require(std::isfinite(bias) && bias >= -100.0f && bias <= 100.0f, "logit_bias",
            fmt::format("of token {} must be in [-100, 100]", id));
  }
}

bool takes_plain_argmax(const SamplingParams& p) {
  return p.temperature <= 0.0f && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f && p.logit_bias.empty();
}

int32_t argmax(const float* values, int64_t count) {
  // The largest value first (eight independent branch-free lanes, so the loop
  // is not one long dependency chain), then its first index: the lowest id on
  // a tie, as std::max_element.
  float lane[8];
  std::fill(lane, lane + 8, values[0]);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    for (int k = 0; k < 8; ++k) lane[k] = values[i + k] > lane[k] ? values[i + k] : lane[k];
  }
  for (; i < count; ++i) lane[0] = values[i] > lane[0] ? values[i] : lane[0];
  float best = lane[0];
  for (int k = 1; k < 8; ++k) best = lane[k] > best ? lane[k] : best;
  for (i = 0; i < count; ++i) {
    if (values[i] == best) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(std::max_element(values, values + count) - values);  // NaNs only
}

std::vector<backend::LogitEdit> logit_edits(const SamplingParams& p, const SampleInputs& in, int64_t vocab,
                                            int32_t row) {
  std::vector<backend::LogitEdit> edits;
  std::unordered_map<int32_t, size_t> index;  // id -> its edit
  auto edit = [&](int32_t id) -> backend::LogitEdit* {
    if (id < 0 || id >= vocab) return nullptr;
    auto [it, added] = index.try_emplace(id, edits.size());
    if (added) edits.push_back({row, id});
    return &edits[it->second];
  };
  if (p.repetition_penalty != 1.0f) {
    // Each id once, however often it occurs.
    index.reserve(in.prompt.size() + in.output.size());
    for (int32_t id : in.prompt) {
      if (auto* e = edit(id)) e->repetition_penalty = p.repetition_penalty;
    }
    for (int32_t id : in.output) {
      if (auto* e = edit(id)) e->repetition_penalty = p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int32_t id : in.output) ++counts[id];
    for (auto [id, count] : counts) {
      if (auto* e = edit(id)) e->penalty = p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    }
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (auto* e = edit(id)) e->bias = bias;
  }
  for (int32_t id : in.masked) {
    if (auto* e = edit(id)) e->masked = 1;
  }
  return edits;
}

void apply_penalties_and_masks(std::vector<float>& x, const SamplingParams& p, const SampleInputs& in) {
  for (const backend::LogitEdit& e : logit_edits(p, in, static_cast<int64_t>(x.size()))) {
    float v = x[e.id];
    if (e.repetition_penalty != 1.0f) v = v > 0.0f ? v / e.repetition_penalty : v * e.repetition_penalty;
    v -= e.penalty;
    v += e.bias;
    x[e.id] = e.masked != 0 ? kNegInf : v;
  }
  if (!in.allowed.empty()) {
    for (size_t id = 0; id < x.size(); ++id) {
      if (id / 64 >= in.allowed.size() || (in.allowed[id / 64] >> (id % 64) & 1) == 0) x[id] = kNegInf;
    }
  }
}

SampleResult Sampler::sample(std::span<const float> logits, const SampleInputs& in) {
  TESSERA_CHECK(!logits.empty());
  const bool plain_greedy = takes_plain_argmax(params_) && in.masked.empty() && in.allowed.empty() && !in.logprobs &&
                            in.top_logprobs == 0;
  if (plain_greedy) return {argmax(logits.data(), static_cast<int64_t>(logits.size())), 0.0f, {}};  // nothing to copy
  std::vector<float> x(logits.begin(), logits.end());
  apply_penalties_and_masks(x, params_, in);
  const bool greedy = params_.temperature <= 0.0f;
  if (!greedy) {
    for (float& v : x) v /= params_.temperature;
  }
  const bool want_logprobs = in.logprobs || in.top_logprobs > 0;
  // log Σ exp over the whole vocabulary: only top_p and logprobs need it (the
  // draw's weights are relative to the likeliest token).
  double log_total = std::numeric_limits<double>::quiet_NaN();
  if (want_logprobs || (!greedy && params_.top_p < 1.0f)) log_total = log_sum_exp(x);
  SampleResult result;
  if (greedy) {
    result.token = argmax(x.data(), static_cast<int64_t>(x.size()));
  } else {
    result.token = draw(x, log_total);
  }
  if (want_logprobs) {
    result.logprob = static_cast<float>(static_cast<double>(x[result.token]) - log_total);
    for (int32_t id : top_ids(x, static_cast<size_t>(std::max<int32_t>(0, in.top_logprobs)))) {
      result.top_logprobs.push_back({id, static_cast<float>(static_cast<double>(x[id]) - log_total)});
    }
  }
  return result;
}

namespace {
// How many of `order` (likeliest first) it takes for their probability to
// reach top_p; 0 when all of them do not. The sum goes on from `cumulative`,
// that of order[0, from) (0 and 0 to start), and is left there.
size_t top_p_count(const std::vector<float>& x, const std::vector<int32_t>& order, double log_total, float top_p,
                   size_t from = 0, double* cumulative_io = nullptr) {
  double cumulative = cumulative_io != nullptr ? *cumulative_io : 0.0;
  size_t count = 0;
  for (size_t i = from; i < order.size(); ++i) {
    cumulative += std::exp(static_cast<double>(x[order[i]]) - log_total);
    if (cumulative >= top_p) {
      count = i + 1;
      break;
    }
  }
  if (cumulative_io != nullptr) *cumulative_io = cumulative;
  return count;
}
}  // namespace

int32_t Sampler::draw(const std::vector<float>& x, double log_total) {
  const double uniform = next_uniform();  // first: one number per sample, whatever follows
  const size_t vocab = x.size();
  // The candidates, likeliest first: top_k of them; without top_k, enough to
  // reach top_p (a few hundred of a peaked distribution; four times more
  // until the probability is there); the tokens above min_p's threshold; or
  // every token when nothing truncates.
  std::vector<int32_t> order;
  const bool truncates = params_.top_k > 0 || params_.top_p < 1.0f || params_.min_p > 0.0f;
  size_t top_p_keep = 0;  // of order, what top_p keeps (0: all of it)
  if (params_.top_k > 0) {
    order = top_ids(x, static_cast<size_t>(params_.top_k));
    if (params_.top_p < 1.0f) top_p_keep = top_p_count(x, order, log_total, params_.top_p);
  } else if (params_.top_p < 1.0f) {
    // The 256 likeliest, then 1024 (a peaked row's top_p is within them;
    // each found by a pass with a small heap), then a flat row's ranked again
    // in slices of 4096, 16384, ..., the sum going on over each, so that no
    // token is ranked twice (selecting the first 4^n · 256 afresh each time
    // re-sorted a flat row's nucleus up to four times: a row of 92,544
    // went from 4-22 ms to 3-7, BENCHMARKS.md).
    for (size_t count = 256; count <= 1024 && top_p_keep == 0 && order.size() < vocab; count *= 4) {
      order = top_ids(x, count);
      top_p_keep = top_p_count(x, order, log_total, params_.top_p);
    }
    if (top_p_keep == 0 && order.size() < vocab) {
      LikeliestSlices slices(x);
      order.clear();
      double cumulative = 0.0;
      for (size_t count = 4096; top_p_keep == 0 && !slices.done(); count *= 4) {
        const size_t from = order.size();
        slices.next(count, order);
        top_p_keep = top_p_count(x, order, log_total, params_.top_p, from, &cumulative);
      }
    }
  } else if (params_.min_p > 0.0f) {
    const float best = *std::max_element(x.begin(), x.end());
    const double threshold = std::log(static_cast<double>(params_.min_p)) + best;
    for (size_t i = 0; i < vocab; ++i) {
      if (static_cast<double>(x[i]) >= threshold) order.push_back(static_cast<int32_t>(i));
    }
    if (order.empty()) order.push_back(argmax(x.data(), static_cast<int64_t>(vocab)));  // all -inf
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return likelier(x, a, b); });
  }
  std::vector<int32_t> kept;  // in id order
  double best = 0.0;
  if (truncates) {
    size_t keep = top_p_keep > 0 ? top_p_keep : order.size();
    best = x[order[0]];
    if (params_.min_p > 0.0f) {
      const double threshold = std::log(static_cast<double>(params_.min_p)) + best;
      size_t n = 1;
      while (n < keep && static_cast<double>(x[order[n]]) >= threshold) ++n;
      keep = n;
    }
    if (keep > vocab / 16) {  // many: marked, then read in id order, rather than sorted
      std::vector<uint8_t> in(vocab, 0);
      for (size_t i = 0; i < keep; ++i) in[static_cast<size_t>(order[i])] = 1;
      kept.reserve(keep);
      for (size_t id = 0; id < vocab; ++id) {
        if (in[id] != 0) kept.push_back(static_cast<int32_t>(id));
      }
    } else {
      kept.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep));
      std::sort(kept.begin(), kept.end());
    }
  } else {
    kept.resize(vocab);
    std::iota(kept.begin(), kept.end(), 0);
    best = *std::max_element(x.begin(), x.end());
  }
  int32_t token = truncates ? order[0] : argmax(x.data(), static_cast<int64_t>(vocab));
  if (best == -std::numeric_limits<double>::infinity()) return token;  // every token masked: the lowest id
  // Inverse transform over the kept tokens, in id order, weights relative to the likeliest.
  std::vector<double> weights(kept.size());
  double total = 0.0;
  for (size_t i = 0; i < kept.size(); ++i) total += weights[i] = std::exp(static_cast<double>(x[kept[i]]) - best);
  double target = uniform * total;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (weights[i] <= 0.0) continue;
    token = kept[i];
    target -= weights[i];
    if (target <= 0.0) break;
  }
  return token;
}

backend::SamplingRow Sampler::device_row() {
  backend::SamplingRow row;
  row.temperature = params_.temperature;
  if (params_.temperature > 0.0f) {
    row.top_k = params_.top_k;
    row.top_p = params_.top_p;
    row.min_p = params_.min_p;
    row.uniform = next_uniform();
  }
  return row;
}

}  // namespace tessera::engine
