// Sampling on the GPU (backend/row_sampling.h): each row of a step's logits
// is edited (penalties, logit_bias, masks), then sampled by the rule of
// engine::Sampler — argmax at temperature 0, otherwise truncation to the first
// K tokens of the order "likeliest first, lowest id on a tie" and an inverse
// transform in id order at the row's uniform number — so the logits never
// leave the device, only the ids do.
//
// One thread block per row, reading the row (a few hundred KB, from L2) a
// handful of times:
//   1. the largest processed logit x/T (and its lowest id);
//   2. top_p: the total weight, then a radix descent over the 32-bit order
//      keys (four 8-bit digits) by weight finds how many tokens it takes to
//      reach top_p; min_p: a count of the tokens at or above its threshold;
//   3. a radix descent by count finds the K-th token of the order: its key,
//      and how many of the tokens tied at that key (lowest ids first) are in
//      (where top_p sets K, its descent has found them already);
//   4. the draw: each thread owns a contiguous chunk of ids, block scans in id
//      order give each chunk its tie rank and its weight offset, and the one
//      chunk holding the target walks to the token.
// Weights are exp(x/T - max) as fixed-point integers (2^40 for the likeliest
// token): integer sums are exact in any order, so a row gives the same token
// whatever the thread schedule, and the histograms need no ordered float
// atomics. The host sampler sums doubles; the two agree but for draws within
// about 1e-7 of a boundary.
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace tessera::backend::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kBins = 256;                       // one 8-bit digit of a key
constexpr float kWeightScale = 1099511627776.0f;  // 2^40: the likeliest token's fixed-point weight

template <typename V>
__device__ __forceinline__ V smaller(V a, V b) {
  return b < a ? b : a;
}
template <typename V>
__device__ __forceinline__ V larger(V a, V b) {
  return a < b ? b : a;
}

// Larger key, larger value; -0 and +0 one key (they tie, as on the host).
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t bits = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ uint64_t fixed_weight(float v, float best) {
  return __float2ull_rz(expf(v - best) * kWeightScale);
}

struct Best {
  float value;
  int32_t id;
};

struct Likelier {
  __device__ Best operator()(const Best& a, const Best& b) const {
    return (b.value > a.value || (b.value == a.value && b.id < a.id)) ? b : a;
  }
};

using ReduceBest = cub::BlockReduce<Best, kThreads>;
using ReduceU64 = cub::BlockReduce<unsigned long long, kThreads>;
using ReduceU32 = cub::BlockReduce<uint32_t, kThreads>;
using ScanU32 = cub::BlockScan<uint32_t, kThreads>;
using ScanU64 = cub::BlockScan<unsigned long long, kThreads>;
constexpr int kPerThread = 8;
constexpr int kCandidates = kThreads * kPerThread;  // at most this many likeliest tokens the fast path sorts
constexpr int kWanted = 1024;                       // how many it gathers at least, without a top_k
// Gaps below the largest processed logit, rising by √2, and the whole row
// last: the fast path gathers the tokens within the smallest gap that holds
// the ones it wants.
constexpr int kGaps = 16;
__constant__ float kGap[kGaps] = {0.25f, 0.3536f, 0.5f, 0.7071f, 1.0f, 1.4142f, 2.0f, 2.8284f,
                                  4.0f,  5.6569f, 8.0f, 11.314f, 16.0f, 22.627f, 32.0f, INFINITY};
// The fast path's sorts of more gathered tokens than the block has threads
// (kPerThread a thread): (key << 32) | ~id descending, the kept ids ascending.
using SortOrder = cub::BlockRadixSort<unsigned long long, kThreads, kPerThread>;
using SortIds = cub::BlockRadixSort<uint32_t, kThreads, kPerThread>;
constexpr int kHistogramCopies = 8;

struct Shared {
  union {
    ReduceBest::TempStorage best;
    ReduceU64::TempStorage sum64;
    ReduceU32::TempStorage sum32;
    ScanU32::TempStorage scan32;
    ScanU64::TempStorage scan64;
    SortOrder::TempStorage sort_order;
    unsigned long long candidates[kCandidates];  // (key << 32) | ~id of the likeliest tokens, before their sort
    SortIds::TempStorage sort_ids;
    // radix_select's histograms of one digit, a copy for each pair of warps
    // (fewer lanes meeting on one bin's atomics), a weight as its low and
    // high 32 bits: with 64-bit shared atomics a flat row's descent by
    // weight took five times as long (on an H100, 680 against 134 us).
    struct {
      uint32_t counts[kHistogramCopies][kBins];
      uint32_t weights_low[kHistogramCopies][kBins];
      uint32_t weights_high[kHistogramCopies][kBins];
    } histograms;
  } cub;
  uint32_t within[kGaps];  // tokens within each gap of the largest
  uint32_t counts[kBins];  // radix_select's histograms, the copies summed
  unsigned long long weights[kBins];
  // Results broadcast by one thread to the block.
  Best best;
  unsigned long long total;
  uint32_t count;
  uint32_t digit;
  uint32_t above_count;
  unsigned long long above_weight;
  unsigned long long remaining;
  int32_t token;
  uint32_t slots;
  uint32_t top_p_count;
};

__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// One row's processed logits, x / T, read where they lie.
struct Row {
  const float* x;
  int64_t n;
  float temperature;
  float best;
  __device__ float value(int64_t j) const { return x[j] / temperature; }
};

// Calls f(j, x[j], valid) for this thread's share of the row x[0, n), the
// same number of times on every thread of the block (valid false past the
// row), so f may use warp collectives. A pass over the row is one block's
// work and bound by the latency of its loads: each thread keeps kRowLoads
// 16-byte loads in flight (with one 4-byte load a thread in flight, a pass
// over 92,544 logits was tens of microseconds).
constexpr int kRowLoads = 8;
template <typename F>
__device__ __forceinline__ void for_each_logit(const float* __restrict__ x, int64_t n, F&& f) {
  const int64_t threads = blockDim.x;
  if (n % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n4 = n / 4;
    for (int64_t start = 0; start < n4; start += threads * kRowLoads) {
      float4 v[kRowLoads];
#pragma unroll
      for (int u = 0; u < kRowLoads; ++u) {
        const int64_t i = start + u * threads + threadIdx.x;
        v[u] = i < n4 ? __ldg(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kRowLoads; ++u) {
        const int64_t i = start + u * threads + threadIdx.x;
        const bool valid = i < n4;
        f(4 * i, v[u].x, valid);
        f(4 * i + 1, v[u].y, valid);
        f(4 * i + 2, v[u].z, valid);
        f(4 * i + 3, v[u].w, valid);
      }
    }
    return;
  }
  for (int64_t start = 0; start < n; start += threads * kRowLoads) {
    float v[kRowLoads];
#pragma unroll
    for (int u = 0; u < kRowLoads; ++u) {
      const int64_t j = start + u * threads + threadIdx.x;
      v[u] = j < n ? __ldg(x + j) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kRowLoads; ++u) {
      const int64_t j = start + u * threads + threadIdx.x;
      f(j, v[u], j < n);
    }
  }
}

// The K-th token of the order, found digit by digit. `by_weight`: the first
// tokens whose weights sum to at least `target`; otherwise the first `target`
// tokens. On return: key = the last of them's key; above_count/above_weight =
// the tokens with a larger key; remaining = the count (or weight) still
// wanted from the tokens tied at `key` (>= 1); tied = how many there are.
struct Selected {
  uint32_t key;
  uint32_t above_count;
  unsigned long long above_weight;
  unsigned long long remaining;
  uint32_t tied;
};

__device__ Selected radix_select(const Row& row, bool by_weight, unsigned long long target, Shared& s) {
  uint32_t prefix = 0;
  uint32_t above_count = 0;
  unsigned long long above_weight = 0;
  unsigned long long remaining = target;
  uint32_t tied = 0;
  auto& h = s.cub.histograms;  // free here: the fast path, which gathers there, is over
  const int copy = (threadIdx.x / 32) % kHistogramCopies;
  // A run's count and weight into this warp pair's copy; the weight's low
  // half carries into the high one exactly when its add wraps, so the two
  // halves sum to the weights exactly in any order.
  auto add = [&](int bin, uint32_t count, unsigned long long weight) {
    atomicAdd(&h.counts[copy][bin], count);
    if (!by_weight) return;
    const auto low = static_cast<uint32_t>(weight);
    const uint32_t before = atomicAdd(&h.weights_low[copy][bin], low);
    const uint32_t high = static_cast<uint32_t>(weight >> 32) + (before + low < before ? 1u : 0u);
    if (high != 0) atomicAdd(&h.weights_high[copy][bin], high);
  };
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kHistogramCopies * kBins; b += blockDim.x) {
      (&h.counts[0][0])[b] = 0;
      (&h.weights_low[0][0])[b] = 0;
      (&h.weights_high[0][0])[b] = 0;
    }
    __syncthreads();
    const uint32_t high = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    // Runs of one digit accumulate in registers and are added when the digit
    // changes (the top digits of a row's keys fall into few bins).
    int run_bin = -1;
    uint32_t run_count = 0;
    unsigned long long run_weight = 0;
    for_each_logit(row.x, row.n, [&](int64_t, float x, bool valid) {
      const float v = x / row.temperature;
      const uint32_t key = order_key(v);
      if (!valid || (key & high) != prefix) return;
      const int bin = static_cast<int>((key >> shift) & 0xffu);
      if (bin != run_bin) {
        if (run_count > 0) add(run_bin, run_count, run_weight);
        run_bin = bin;
        run_count = 0;
        run_weight = 0;
      }
      ++run_count;
      if (by_weight) run_weight += fixed_weight(v, row.best);
    });
    if (run_count > 0) add(run_bin, run_count, run_weight);
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
      uint32_t count = 0;
      unsigned long long weight = 0;
      for (int c = 0; c < kHistogramCopies; ++c) {
        count += h.counts[c][b];
        weight += (static_cast<unsigned long long>(h.weights_high[c][b]) << 32) | h.weights_low[c][b];
      }
      s.counts[b] = count;
      s.weights[b] = weight;
    }
    __syncthreads();
    // Warp 0: lane l holds bins 255 - 8l down to 248 - 8l; a scan over the
    // lanes gives the measure above each lane, and the lane where the target
    // is crossed finds the digit.
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      uint32_t lane_count = 0;
      unsigned long long lane_weight = 0;
      for (int i = 0; i < 8; ++i) {
        lane_count += s.counts[255 - 8 * lane - i];
        lane_weight += s.weights[255 - 8 * lane - i];
      }
      uint32_t count_incl = lane_count;
      unsigned long long weight_incl = lane_weight;
      for (int offset = 1; offset < 32; offset *= 2) {
        const uint32_t c = __shfl_up_sync(0xffffffffu, count_incl, offset);
        const unsigned long long w = __shfl_up_sync(0xffffffffu, weight_incl, offset);
        if (lane >= offset) {
          count_incl += c;
          weight_incl += w;
        }
      }
      uint32_t count_above = count_incl - lane_count;
      unsigned long long weight_above = weight_incl - lane_weight;
      const unsigned long long measure_above = by_weight ? weight_above : count_above;
      const unsigned long long measure_incl = by_weight ? weight_incl : count_incl;
      if (measure_above < remaining && remaining <= measure_incl) {
        for (int i = 0; i < 8; ++i) {
          const int bin = 255 - 8 * lane - i;
          const unsigned long long m = by_weight ? s.weights[bin] : s.counts[bin];
          const unsigned long long m_above = by_weight ? weight_above : count_above;
          if (remaining <= m_above + m) {
            s.digit = static_cast<uint32_t>(bin);
            s.above_count = count_above;
            s.above_weight = weight_above;
            s.remaining = remaining - m_above;
            s.count = s.counts[bin];
            break;
          }
          count_above += s.counts[bin];
          weight_above += s.weights[bin];
        }
      }
    }
    __syncthreads();
    prefix |= s.digit << shift;
    above_count += s.above_count;
    above_weight += s.above_weight;
    remaining = s.remaining;
    tied = s.count;
    __syncthreads();  // before the next digit's histogram overwrites the shared values
  }
  return {prefix, above_count, above_weight, remaining, tied};
}

// Where the gathered tokens fit one a thread, each thread places its own by
// counting, over the others in shared memory, those that come before it:
// exact for distinct values, one pass of at most kThreads comparisons a
// thread, where a block radix sort of 64-bit keys takes 16 passes of scans
// and barriers (on an H100 a row at top_k 40 went from 104 to 90 us:
// BENCHMARKS.md). values[0, count) distinct, `out` a separate count slots;
// `before(a, b)`: a comes first.
template <typename V, typename Before>
__device__ void rank_sort(const V* values, uint32_t count, V* out, const Before& before) {
  const uint32_t t = threadIdx.x;
  if (t < count) {
    const V mine = values[t];
    uint32_t rank = 0;
    for (uint32_t j = 0; j < count; ++j) rank += before(values[j], mine) ? 1u : 0u;  // one address: a broadcast
    out[rank] = mine;
  }
  __syncthreads();
}

// The fast path once its m tokens (the first m of the order, c of them
// wanted; top_k_bounds: c is top_k) are gathered in s.cub.candidates:
// sorted (kItems 1: m <= kThreads, by rank_sort; else by block radix sorts
// of kThreads * kPerThread slots), then cut and drawn from.
template <int kItems>
__device__ bool sample_gathered(const Row& row, const SamplingRow& p, unsigned long long total_weight, uint32_t m,
                                uint32_t c, bool top_k_bounds, Shared& s, int32_t* token) {
  // Likeliest first (a larger key, then a lower id): thread t holds ranks kItems t to kItems t + kItems - 1.
  unsigned long long order[kItems];
  if constexpr (kItems == 1) {
    unsigned long long* sorted = s.cub.candidates + kThreads;  // past the m <= kThreads gathered
    rank_sort(s.cub.candidates, m, sorted, [](unsigned long long a, unsigned long long b) { return a > b; });
    order[0] = threadIdx.x < m ? sorted[threadIdx.x] : 0ull;  // 0: below every real token
  } else {
    for (int i = 0; i < kItems; ++i) {
      const uint32_t rank = threadIdx.x * kItems + i;
      order[i] = rank < m ? s.cub.candidates[rank] : 0ull;  // 0: below every real token
    }
    __syncthreads();
    SortOrder(s.cub.sort_order).SortDescending(order);
  }
  __syncthreads();
  unsigned long long weight[kItems];
  float value[kItems];
  for (int i = 0; i < kItems; ++i) {
    const uint32_t rank = threadIdx.x * kItems + i;
    value[i] = key_value(static_cast<uint32_t>(order[i] >> 32));
    weight[i] = rank < m ? fixed_weight(value[i], row.best) : 0ull;
  }

  uint32_t keep = top_k_bounds ? c : m;
  bool bounded = top_k_bounds || static_cast<int64_t>(m) == row.n;
  if (p.top_p < 1.0f) {
    const unsigned long long target = larger(
        1ull, static_cast<unsigned long long>(ceil(static_cast<double>(p.top_p) * static_cast<double>(total_weight))));
    unsigned long long before[kItems];
    ScanU64(s.cub.scan64).ExclusiveSum(weight, before);
    for (int i = 0; i < kItems; ++i) {
      if (before[i] < target && target <= before[i] + weight[i]) {
        atomicMin(&s.top_p_count, threadIdx.x * kItems + i + 1);
      }
    }
    __syncthreads();
    if (s.top_p_count != 0xffffffffu) {
      keep = smaller(keep, s.top_p_count);
      bounded = true;
    }
  }
  if (p.min_p > 0.0f) {
    const double threshold = log(static_cast<double>(p.min_p)) + static_cast<double>(row.best);
    uint32_t count = 0;
    for (int i = 0; i < kItems; ++i) {
      count += (threadIdx.x * kItems + i < m && static_cast<double>(value[i]) >= threshold) ? 1u : 0u;
    }
    __syncthreads();
    const uint32_t at_least = larger(1u, ReduceU32(s.cub.sum32).Sum(count));
    if (threadIdx.x == 0) s.count = at_least;
    __syncthreads();
    if (s.count < m) bounded = true;
    keep = smaller(keep, s.count);
  }
  if (!bounded) return false;  // uniform over the block: every thread read the same shared values

  // The draw, in id order over the first `keep` ranks.
  uint32_t ids[kItems];
  for (int i = 0; i < kItems; ++i) {
    const uint32_t rank = threadIdx.x * kItems + i;
    ids[i] = rank < keep ? ~static_cast<uint32_t>(order[i]) : 0xffffffffu;
  }
  __syncthreads();
  if constexpr (kItems == 1) {
    // The kept ids are the first `keep` ranks, one a thread, and distinct.
    uint32_t* kept = reinterpret_cast<uint32_t*>(s.cub.candidates);
    if (threadIdx.x < keep) kept[threadIdx.x] = ids[0];
    __syncthreads();
    rank_sort(kept, keep, kept + kThreads, [](uint32_t a, uint32_t b) { return a < b; });
    ids[0] = threadIdx.x < keep ? kept[kThreads + threadIdx.x] : 0xffffffffu;
  } else {
    SortIds(s.cub.sort_ids).Sort(ids);
  }
  __syncthreads();
  unsigned long long drawn_weight[kItems], before[kItems], total = 0;
  for (int i = 0; i < kItems; ++i) {
    drawn_weight[i] = ids[i] != 0xffffffffu ? fixed_weight(row.value(ids[i]), row.best) : 0ull;
  }
  ScanU64(s.cub.scan64).ExclusiveSum(drawn_weight, before, total);
  unsigned long long target = static_cast<unsigned long long>(ceil(p.uniform * static_cast<double>(total)));
  target = smaller(larger(target, 1ull), total);
  for (int i = 0; i < kItems; ++i) {
    if (before[i] < target && target <= before[i] + drawn_weight[i]) s.token = static_cast<int32_t>(ids[i]);
  }
  __syncthreads();
  *token = s.token;
  return true;
}

// The fast path of a truncating row: the tokens within the smallest gap
// below the largest processed logit that holds the first C of the order (C =
// top_k when it is at most kCandidates, else kWanted) — themselves the first
// M of the order, C <= M <= kCandidates — gathered and sorted in shared
// memory, where top_p's and min_p's counts are prefix sums. Returns false,
// with nothing written, when no gap holds C to kCandidates tokens, or when the
// kept tokens may lie past the M (no top_k, and neither top_p nor min_p cuts
// within them): the row then takes the whole-row path. `total_weight`: the
// row's, when top_p < 1.
__device__ bool sample_from_candidates(const Row& row, const SamplingRow& p, unsigned long long total_weight,
                                       Shared& s, int32_t* token) {
  const bool top_k_bounds = p.top_k > 0 && p.top_k <= kCandidates;
  const uint32_t c = static_cast<uint32_t>(smaller<int64_t>(row.n, top_k_bounds ? p.top_k : kWanted));
  const int lane = threadIdx.x & 31;

  // Counts within every gap at once, in registers (no atomics per token).
  uint32_t within[kGaps];
  for (int g = 0; g < kGaps; ++g) within[g] = 0;
  for_each_logit(row.x, row.n, [&](int64_t, float x, bool valid) {
    if (!valid) return;
    const float gap = row.best - x / row.temperature;
#pragma unroll
    for (int g = 0; g < kGaps; ++g) within[g] += gap <= kGap[g] ? 1u : 0u;
  });
  if (threadIdx.x < kGaps) s.within[threadIdx.x] = 0;
  if (threadIdx.x == 0) s.slots = 0;
  __syncthreads();
  for (int g = 0; g < kGaps; ++g) {
    uint32_t sum = within[g];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) atomicAdd(&s.within[g], sum);
  }
  if (threadIdx.x == 0) s.top_p_count = 0xffffffffu;
  __syncthreads();
  int chosen = -1;
  for (int g = 0; g < kGaps && chosen < 0; ++g) chosen = s.within[g] >= c ? g : -1;
  if (chosen < 0 || s.within[chosen] > kCandidates) return false;
  const uint32_t m = s.within[chosen];
  const float gap_limit = kGap[chosen];

  // Gather them (every lane runs every round, for the ballot).
  for_each_logit(row.x, row.n, [&](int64_t j, float x, bool valid) {
    const float v = valid ? x / row.temperature : -INFINITY;
    const bool in = valid && row.best - v <= gap_limit;
    const unsigned ballot = __ballot_sync(0xffffffffu, in);
    if (ballot == 0) return;  // the same for the whole warp
    uint32_t base = 0;
    if (lane == 0) base = atomicAdd(&s.slots, static_cast<uint32_t>(__popc(ballot)));
    base = __shfl_sync(0xffffffffu, base, 0);
    if (in) {
      const uint32_t slot = base + __popc(ballot & ((1u << lane) - 1u));
      s.cub.candidates[slot] = (static_cast<unsigned long long>(order_key(v)) << 32) | ~static_cast<uint32_t>(j);
    }
  });
  __syncthreads();

  if (m <= static_cast<uint32_t>(kThreads)) return sample_gathered<1>(row, p, total_weight, m, c, top_k_bounds, s, token);
  return sample_gathered<kPerThread>(row, p, total_weight, m, c, top_k_bounds, s, token);
}

__global__ void apply_logit_edits_kernel(float* __restrict__ logits, int64_t vocab, const LogitEdit* __restrict__ edits,
                                         int64_t count) {
  wait_for_previous_kernel();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const LogitEdit e = edits[i];
  float* x = logits + int64_t(e.row) * vocab + e.id;
  float v = *x;
  if (e.repetition_penalty != 1.0f) v = v > 0.0f ? v / e.repetition_penalty : v * e.repetition_penalty;
  v -= e.penalty;
  v += e.bias;
  if (e.masked != 0) v = -INFINITY;
  *x = v;
}

// One block a masked row: -inf wherever the row's allowed bit is clear.
__global__ void apply_allowed_kernel(float* __restrict__ logits, int64_t vocab, const int32_t* __restrict__ rows,
                                     const uint64_t* __restrict__ bits) {
  wait_for_previous_kernel();
  const int64_t words = (vocab + 63) / 64;
  float* x = logits + int64_t(rows[blockIdx.x]) * vocab;
  const uint64_t* row_bits = bits + int64_t(blockIdx.x) * words;
  for (int64_t id = threadIdx.x; id < vocab; id += blockDim.x) {
    if (((row_bits[id >> 6] >> (id & 63)) & 1u) == 0) x[id] = -INFINITY;
  }
}

// This thread's share of the scan for the largest x[j] (lowest j on a tie).
// Where the row allows, 16-byte loads, sixteen of them in flight a thread: at
// batch 1 this scan of the vocabulary is the whole kernel, one block long,
// and bound by the latency of its loads (with four in flight a thread it
// moved about 35 GB/s: 10.6 us for 92,544 logits on an H100).
__device__ Best likeliest_logit(const float* __restrict__ x, int64_t n) {
  Best mine{-INFINITY, 0x7fffffff};
  if (n % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    constexpr int kLoads = 16;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n4 = n / 4;
    for (int64_t base = threadIdx.x; base < n4; base += int64_t(blockDim.x) * kLoads) {
      float4 v[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int64_t i = base + int64_t(u) * blockDim.x;
        v[u] = i < n4 ? __ldg(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int64_t i = base + int64_t(u) * blockDim.x;
        if (i >= n4) break;  // past the row: no candidate (not even -inf at an id past n)
        const auto id = static_cast<int32_t>(4 * i);
        mine = Likelier()(mine, Best{v[u].x, id});
        mine = Likelier()(mine, Best{v[u].y, id + 1});
        mine = Likelier()(mine, Best{v[u].z, id + 2});
        mine = Likelier()(mine, Best{v[u].w, id + 3});
      }
    }
    return mine;
  }
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mine = Likelier()(mine, Best{x[j], static_cast<int32_t>(j)});
  return mine;
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const float* __restrict__ logits, int64_t n,
                                                               const SamplingRow* __restrict__ rows,
                                                               int32_t* __restrict__ ids) {
  wait_for_previous_kernel();
  __shared__ Shared s;
  const SamplingRow p = rows[blockIdx.x];
  const bool greedy = p.temperature <= 0.0f;
  Row row{logits + int64_t(blockIdx.x) * n, n, greedy ? 1.0f : p.temperature, 0.0f};

  // 1. The likeliest token (temperature 0: the answer). x / T rounds
  // monotonically in x (T > 0), so the largest processed logit is the largest
  // logit over T, rounded the same way: the scan reads the raw row, without a
  // division per token, and its id (lowest on a tie) is only used at T = 0.
  const Best best = ReduceBest(s.cub.best).Reduce(likeliest_logit(row.x, n), Likelier());
  if (threadIdx.x == 0) s.best = best;
  __syncthreads();
  row.best = s.best.value / row.temperature;
  // A row of -inf (or NaN) only: id 0, as the host's argmax starts there.
  const int32_t best_id = s.best.id == 0x7fffffff ? 0 : s.best.id;
  if (greedy || row.best == -INFINITY) {
    if (threadIdx.x == 0) ids[blockIdx.x] = best_id;
    return;
  }

  // The row's total weight, for top_p.
  if (p.top_p < 1.0f) {
    unsigned long long weight = 0;
    for_each_logit(row.x, n, [&](int64_t, float x, bool valid) {
      if (valid) weight += fixed_weight(x / row.temperature, row.best);
    });
    const unsigned long long total = ReduceU64(s.cub.sum64).Sum(weight);
    if (threadIdx.x == 0) s.total = total;
    __syncthreads();
  }
  const unsigned long long total_weight = p.top_p < 1.0f ? s.total : 0ull;
  if (threadIdx.x == 0) s.token = best_id;  // where rounding leaves a target past every token
  __syncthreads();
  if (p.top_k > 0 || p.top_p < 1.0f || p.min_p > 0.0f) {
    int32_t token = 0;
    if (sample_from_candidates(row, p, total_weight, s, &token)) {
      if (threadIdx.x == 0) ids[blockIdx.x] = token;
      return;
    }
    __syncthreads();
  }

  // 2. The whole-row path. K: how many of the likeliest tokens are kept.
  uint64_t keep = static_cast<uint64_t>(n);
  if (p.top_k > 0) keep = smaller(keep, static_cast<uint64_t>(p.top_k));
  // Where top_p sets K, its descent by weight already found the K-th token.
  uint64_t top_p_keep = 0;
  uint32_t top_p_key = 0, top_p_ties = 0, top_p_tied = 0;
  if (p.top_p < 1.0f) {
    const unsigned long long target = larger(
        1ull, static_cast<unsigned long long>(ceil(static_cast<double>(p.top_p) * static_cast<double>(total_weight))));
    if (target <= total_weight) {
      const Selected cut = radix_select(row, true, target, s);
      // Tied tokens, lowest id first, until their weight reaches what is still wanted.
      const float tie_value = key_value(cut.key);
      const unsigned long long tie_weight = fixed_weight(tie_value, row.best);
      unsigned long long ties = tie_weight == 0 ? 1 : (cut.remaining + tie_weight - 1) / tie_weight;
      ties = smaller(larger(ties, 1ull), static_cast<unsigned long long>(cut.tied));
      top_p_keep = cut.above_count + ties;
      top_p_key = cut.key;
      top_p_ties = static_cast<uint32_t>(ties);
      top_p_tied = cut.tied;
      keep = smaller(keep, top_p_keep);
    }
  }
  if (p.min_p > 0.0f) {
    const double threshold = log(static_cast<double>(p.min_p)) + static_cast<double>(row.best);
    uint32_t count = 0;
    for_each_logit(row.x, n, [&](int64_t, float x, bool valid) {
      count += valid && static_cast<double>(x / row.temperature) >= threshold ? 1u : 0u;
    });
    const uint32_t at_least = ReduceU32(s.cub.sum32).Sum(count);
    if (threadIdx.x == 0) s.count = at_least;
    __syncthreads();
    keep = smaller(keep, static_cast<uint64_t>(larger(1u, s.count)));
    __syncthreads();
  }

  // 3. The K-th token of the order: kept are the larger keys, and the first
  //    `tie_keep` of the tokens (in id order) tied at its key.
  const bool truncates = keep < static_cast<uint64_t>(n);
  uint32_t cut_key = 0;
  uint32_t tie_keep = 0;
  uint32_t tied = 0;  // tokens at cut_key, of which the first tie_keep are kept
  if (truncates && keep == top_p_keep) {
    cut_key = top_p_key;  // the first above_count + ties of the order: all above the key, `ties` at it
    tie_keep = top_p_ties;
    tied = top_p_tied;
  } else if (truncates) {
    const Selected cut = radix_select(row, false, keep, s);
    cut_key = cut.key;
    tie_keep = static_cast<uint32_t>(cut.remaining);
    tied = cut.tied;
  }
  // Where every token at the cut is kept (most rows: one token has the key),
  // the draw needs no tie ranks.
  const bool ranks_ties = truncates && tie_keep < tied;

  // 4. The draw, over contiguous chunks of ids.
  const int64_t chunk = (n + blockDim.x - 1) / blockDim.x;
  const int64_t begin = smaller(n, int64_t(threadIdx.x) * chunk);
  const int64_t end = smaller(n, begin + chunk);
  uint32_t tie_base = 0;
  if (ranks_ties) {
    uint32_t my_ties = 0;
    for (int64_t j = begin; j < end; ++j) my_ties += order_key(row.value(j)) == cut_key;
    ScanU32(s.cub.scan32).ExclusiveSum(my_ties, tie_base);
    __syncthreads();
  }
  auto kept_weight = [&](int64_t j, uint32_t& tie_rank) -> unsigned long long {
    const float v = row.value(j);
    if (truncates) {
      const uint32_t key = order_key(v);
      if (key < cut_key) return 0;
      if (ranks_ties && key == cut_key && tie_rank++ >= tie_keep) return 0;
    }
    return fixed_weight(v, row.best);
  };
  unsigned long long my_weight = 0;
  uint32_t tie_rank = tie_base;
  for (int64_t j = begin; j < end; ++j) my_weight += kept_weight(j, tie_rank);
  unsigned long long base = 0, total = 0;
  ScanU64(s.cub.scan64).ExclusiveSum(my_weight, base, total);
  if (threadIdx.x == 0) s.token = best_id;  // where rounding leaves the target past every chunk
  __syncthreads();
  // The first kept token whose cumulative weight reaches uniform · total
  // (at least 1, so a token of weight 0 is never drawn).
  unsigned long long target = static_cast<unsigned long long>(ceil(p.uniform * static_cast<double>(total)));
  target = smaller(larger(target, 1ull), total);
  if (base < target && target <= base + my_weight) {
    unsigned long long cumulative = base;
    tie_rank = tie_base;
    for (int64_t j = begin; j < end; ++j) {
      cumulative += kept_weight(j, tie_rank);
      if (cumulative >= target) {
        s.token = static_cast<int32_t>(j);
        break;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) ids[blockIdx.x] = s.token;
}

}  // namespace

void launch_apply_logit_edits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t count,
                              cudaStream_t stream) {
  if (count == 0) return;
  constexpr int kEditThreads = 256;
  launch_after(apply_logit_edits_kernel, static_cast<unsigned>((count + kEditThreads - 1) / kEditThreads),
               kEditThreads, 0, stream, logits, vocab, edits, count);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_apply_allowed(float* logits, int64_t vocab, const int32_t* rows, const uint64_t* bits, int64_t count,
                          cudaStream_t stream) {
  if (count == 0) return;
  launch_after(apply_allowed_kernel, static_cast<unsigned>(count), 256, 0, stream, logits, vocab, rows, bits);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void launch_sample_rows(const float* logits, int64_t m, int64_t vocab, const SamplingRow* rows, int32_t* ids,
                        cudaStream_t stream) {
  if (m == 0) return;
  launch_after(sample_rows_kernel, static_cast<unsigned>(m), kThreads, 0, stream, logits, vocab, rows, ids);
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace tessera::backend::cuda
