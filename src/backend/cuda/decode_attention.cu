// Split-K ("flash-decoding") paged attention for steps of decode tokens only.
//
// Design: a decode token's attention reads its sequence's whole K/V range and
// does little arithmetic per byte, so the kernel is built around reading K/V
// once, in 16-byte loads, from enough thread blocks to keep every SM busy:
//   - GQA-aware: one thread block serves all query heads of one KV head (up to
//     8; larger groups take several blocks), so each K/V row is read once per
//     group rather than once per query head;
//   - split-K: each sequence's key range is cut into up to `num_splits` even
//     pieces of at least kMinSplit positions, one thread block each (grid:
//     splits × KV-head chunks × sequences), so one long sequence fills the GPU
//     too. The pieces follow the length the kernel reads, not the launch: a
//     graph recorded for the longest context a block table holds still spreads
//     a short context over several blocks instead of giving it to one;
//   - inside a block, lanes form row groups of kLanes lanes, each lane holding
//     kPerLane elements of a K/V row (one or two 16-byte loads); a warp covers
//     32 / kLanes positions per step, four warps interleave, each row group
//     keeps an online softmax (max, sum, weighted V) per query head; the
//     loads of four steps are issued together, and the state is rescaled
//     once a pass, for the largest of its four rows' scores, not at every row;
//   - from sm_80 those loads go through a ring of two passes in shared
//     memory (cp.async): a warp issues the next pass's loads before it works
//     on this one's rows, so its loads stay in flight while it computes.
//     Waiting for each pass in registers, 64 sequences read K/V at under 40 %
//     of the copy rate; through the ring, at 70 % (docs/BENCHMARKS.md).
//     TESSERA_DECODE_RING=0 keeps the register path (the one below sm_80);
//   - the row groups' states merge through shared memory; a sequence of one
//     piece has its output written by that block, otherwise each piece writes
//     its normalised output and log-sum-exp (f32), counts itself in
//     `arrivals`, and the block that arrives last weighs every piece and
//     writes the output (then zeroes its counter for the next launch): no
//     second kernel waits on the first.
//   - the first pass of K/V loads goes out before the wait on the previous
//     kernel (every row but the new token's was written before it began);
//   - with DecodeRope, q is rotated as it is staged and the pieces holding
//     the new token rotate its k and write it and its v into the cache
//     first: RoPE costs no kernel of its own on decode steps. Its angles are
//     taken before the wait, and the new row is read from shared memory,
//     not back from the cache.
// Every length is read from device memory (positions), never from the launch,
// so a captured CUDA graph stays right while sequences grow: blocks past a
// sequence's pieces return at once.
// A quantized cache takes the same kernel with C = uint8_t (--quant-policy
// 8: 8-byte loads of 8 codes) or C = Nibbles (--quant-policy 4: 4-byte loads
// of 8 codes; kv_codes.cuh): a lane holds as many elements as with 16-bit
// rows, so the registers stay those of the 16-bit kernel; each row's (scale,
// zero) is loaded with it and the codes dequantized before the dot product;
// RoPE is not fused there (the step's rows are written by their own kernel
// first).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/cuda_types.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_codes.cuh"
#include "core/error.h"

namespace tessera::backend::cuda {

namespace {

constexpr int kDecodeWarps = 4;
constexpr int kMaxGroup = 8;   // query heads per thread block
constexpr int kMinSplit = 32;  // positions a piece takes at least
constexpr int kMaxSplits = 128;
constexpr int kStages = 2;  // passes of K/V rows a thread has in flight or in use (the ring)

// cp.async is sm_80's: older images take the register path.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr bool kHasCpAsync = false;
#else
constexpr bool kHasCpAsync = true;
#endif

constexpr int pow2_ceil(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// C: the cache's element type (the compute type, or uint8_t or Nibbles codes).
template <typename C, int kHeadDim>
struct Layout {
  static constexpr bool kCodes = sizeof(C) == 1;
  // 8 codes (8 or 4 bytes), or 16 bytes of C
  using Load = std::conditional_t<kCodes, std::conditional_t<kElementBits<C> == 4, uint32_t, uint2>, uint4>;
  static constexpr int kVec = kCodes ? 8 : 16 / static_cast<int>(sizeof(C));  // elements per load
  static constexpr int kChunks = kHeadDim / kVec;                         // loads per row
  static constexpr int kLanes = kChunks >= 32 ? 32 : pow2_ceil(kChunks);  // lanes per row (some idle for 96)
  static constexpr int kLoads = (kChunks + kLanes - 1) / kLanes;          // loads per lane per row
  static constexpr int kPerLane = kLoads * kVec;
  static constexpr int kRowsPerWarp = 32 / kLanes;
  static constexpr int kRowGroups = kDecodeWarps * kRowsPerWarp;
  static_assert(kHeadDim % kVec == 0, "a row must be whole loads");
  // Chunk `chunk` of cache row `row`.
  static __device__ __forceinline__ const Load* load_at(const C* cache, int64_t row, int chunk) {
    return static_cast<const Load*>(element_address(cache, row * kHeadDim + chunk * kVec));
  }
};

// One load of a cache row as f32: 16-bit or f32 values (to_floats), or 8
// codes times the row's scale plus its zero (cpu::dequantize_row's fmaf).
template <typename C>
__device__ __forceinline__ void cache_floats(const uint4& v, float* f, float2, C tag) {
  to_floats(v, f, tag);
}
template <typename Codes, typename C>
__device__ __forceinline__ void cache_floats(const Codes& v, float* f, float2 params, C) {
  float c[8];
  code_values(v, c);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = fmaf(c[i], params.x, params.y);
}

// The key range of sequence `seq`'s new token: [first, last].
__device__ __forceinline__ void key_range(const int32_t* positions, int64_t seq, int window, int32_t& first,
                                          int32_t& last) {
  last = positions[seq];
  first = window > 0 ? max(0, last - window + 1) : 0;
}

// Positions per piece for a range of `length` cut into at most `num_splits`
// pieces: even, a multiple of 16, at least kMinSplit.
__device__ __forceinline__ int32_t piece_length(int32_t length, int num_splits) {
  const int32_t even = (length + num_splits - 1) / num_splits;
  return max(kMinSplit, (even + 15) / 16 * 16);
}

// grid (num_splits, kv_heads * chunks_per_group, num_seqs), block kDecodeWarps warps.
// partial [num_seqs, heads, num_splits, head_dim + 1]: normalised output, then lse;
// arrivals [num_seqs, kv_heads * chunks_per_group], zero between launches.
// kGroup: query heads a block holds in registers, the power of two at or
// above the GQA group, at most kMaxGroup. Sized for 8 heads whatever the
// group, the per-lane state took 209 registers (two blocks an SM); for a
// group of 4 (InternLM2.5-7B) it took 137 (three) on the register path.
// C: the cache's element type, T or codes (then k_params/v_params hold
// each row's (scale, zero) and inv_freq is null).
// kRing: each thread's K/V loads go through a ring of kStages passes in
// shared memory (cp.async), the next pass's issued before this one's dot
// products, so a warp's loads stay in flight while it computes; without it
// (or below sm_80) they go to registers and a warp waits for each pass.
template <typename T, typename C, int kHeadDim, int kGroup, bool kRing>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    decode_attention_kernel(const T* __restrict__ qkv, const int32_t* __restrict__ positions,
                            const int32_t* __restrict__ block_tables, int32_t max_blocks_per_seq, int heads,
                            int kv_heads, int block_size, int window, C* k_cache, C* v_cache,
                            const float2* __restrict__ k_params, const float2* __restrict__ v_params, float* partial,
                            int32_t* arrivals, T* __restrict__ out, const float* __restrict__ inv_freq,
                            float rope_scaling, bool early) {
  using L = Layout<C, kHeadDim>;
  using Load = typename L::Load;
  const int split = blockIdx.x, num_splits = gridDim.x;
  const int group = heads / kv_heads;
  const int chunks_per_group = (group + kMaxGroup - 1) / kMaxGroup;
  const int kv = blockIdx.y / chunks_per_group;
  const int head0 = kv * group + (blockIdx.y % chunks_per_group) * kMaxGroup;
  const int count = min(kMaxGroup, kv * group + group - head0);
  const int64_t seq = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row_in_warp = lane / L::kLanes, li = lane % L::kLanes;
  const int row_group = warp * L::kRowsPerWarp + row_in_warp;
  int32_t first, last;
  key_range(positions, seq, window, first, last);
  const int32_t piece = piece_length(last - first + 1, num_splits);
  const int used = (last - first + piece) / piece;  // pieces of this sequence
  if (split >= used) return;  // the same for the whole block
  const int32_t begin = first + split * piece;
  const int32_t end = min(last + 1, begin + piece);
  const int32_t* table = block_tables + seq * max_blocks_per_seq;
  const int64_t qkv_size = int64_t(heads + 2 * kv_heads) * kHeadDim;

  // kUnroll row steps per pass: every K/V load of the pass is issued before the
  // first dot product, so a split of a short context waits for memory once,
  // not once per row step (at batch 1 the loads' latency is the kernel's time).
  constexpr int kStep = kDecodeWarps * L::kRowsPerWarp, kUnroll = L::kLoads == 1 ? 4 : 2;
  constexpr int kThreads = kDecodeWarps * 32;
  constexpr bool kUseRing = kRing && kHasCpAsync;
  Load kr[kUnroll][L::kLoads], vr[kUnroll][L::kLoads];
  float2 kp[kUnroll], vp[kUnroll];  // quantized caches: each row's (scale, zero)

  // The ring ([stage][row step][k, v][load][thread] loads, then code rows'
  // [stage][row step][k, v][row group] params, copied by the row's first
  // lane) shares its bytes with the row groups' merge (acc_shared), which
  // begins after the last pass.
  constexpr size_t kRingLoadBytes = size_t(kStages) * kUnroll * 2 * L::kLoads * kThreads * sizeof(Load);
  constexpr size_t kRingBytes =
      kUseRing ? kRingLoadBytes + (L::kCodes ? size_t(kStages) * kUnroll * 2 * L::kRowGroups * sizeof(float2) : 0)
               : 0;
  constexpr size_t kAccBytes = sizeof(float) * L::kRowGroups * kGroup * kHeadDim;
  __shared__ __align__(16) unsigned char scratch[kRingBytes > kAccBytes ? kRingBytes : kAccBytes];
  auto& acc_shared = *reinterpret_cast<float(*)[L::kRowGroups][kGroup][kHeadDim]>(scratch);
  // Each thread reads back only the slots it filled itself: no barrier between passes.
  auto ring_load = [&](int stage, int u, int kv_index, int j) {
    return reinterpret_cast<Load*>(scratch) + (((stage * kUnroll + u) * 2 + kv_index) * L::kLoads + j) * kThreads +
           threadIdx.x;
  };
  auto ring_params = [&](int stage, int u, int kv_index) -> float2* {
    if constexpr (L::kCodes && kUseRing) {
      return reinterpret_cast<float2*>(scratch + kRingLoadBytes) +
             ((stage * kUnroll + u) * 2 + kv_index) * L::kRowGroups + row_group;
    } else {
      return nullptr;
    }
  };
  auto copy_async = [](void* dst, const void* src) {
    if constexpr (sizeof(Load) == 16) {
      cp_async_16(shared_address(dst), src, 16);
    } else if constexpr (sizeof(Load) == 8) {
      cp_async_8(shared_address(dst), src);
    } else {
      cp_async_4(shared_address(dst), src);
    }
  };
  // Row u of pass `pass` into the ring's stage, all but position `skip` and
  // those past `end` (their slots keep stale values their rows never use);
  // one commit group per pass, empty or not.
  auto issue_pass = [&](int stage, int32_t pass, int32_t skip) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t p = pass + u * kStep + row_in_warp;
      if (p < end && p != skip) {
        const int64_t row = (int64_t(table[p / block_size]) * kv_heads + kv) * block_size + p % block_size;
        if (L::kCodes && li == 0) {
          cp_async_8(shared_address(ring_params(stage, u, 0)), k_params + row);
          cp_async_8(shared_address(ring_params(stage, u, 1)), v_params + row);
        }
#pragma unroll
        for (int j = 0; j < L::kLoads; ++j) {
          const int chunk = j * L::kLanes + li;
          if (chunk < L::kChunks) {
            copy_async(ring_load(stage, u, 0, j), L::load_at(k_cache, row, chunk));
            copy_async(ring_load(stage, u, 1, j), L::load_at(v_cache, row, chunk));
          }
        }
      }
    }
    cp_async_commit();
  };
  // Row u of a pass: its K/V loads (and code rows' params) from cache row `row`.
  auto load_row = [&](int u, int64_t row) {
    if constexpr (L::kCodes) {
      kp[u] = k_params[row];
      vp[u] = v_params[row];
    }
#pragma unroll
    for (int j = 0; j < L::kLoads; ++j) {
      const int chunk = j * L::kLanes + li;
      if (chunk < L::kChunks) {
        kr[u][j] = *L::load_at(k_cache, row, chunk);
        vr[u][j] = *L::load_at(v_cache, row, chunk);
      }
    }
  };
  // The pass's K/V rows but position `skip`'s (zeros past `end` and there).
  auto load_pass = [&](int32_t pass, int32_t skip) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t p = pass + u * kStep + row_in_warp;
      kp[u] = vp[u] = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int j = 0; j < L::kLoads; ++j) kr[u][j] = vr[u][j] = Load{};
      if (p < end && p != skip) {
        load_row(u, (int64_t(table[p / block_size]) * kv_heads + kv) * block_size + p % block_size);
      }
    }
  };
  // The first pass is loaded before the wait: the positions, the block table
  // and every cached row but the new token's were written before the
  // previous kernel began (launch.cuh), so their latency hides behind it.
  // The new token's row is written by that kernel (RoPE) or by this one.
  const int32_t first_pass = begin + warp * L::kRowsPerWarp;
  if constexpr (kUseRing) {
    issue_pass(0, first_pass, last);
  } else {
    load_pass(first_pass, last);
  }
  // The rotation's angle depends on the position and inv_freq (a host upload)
  // only, so it is taken before the wait too: where the block's threads are a
  // multiple of head_dim / 2, each thread only ever rotates element pairs at
  // one offset d = threadIdx.x % (head_dim / 2).
  constexpr int kHalf = kHeadDim / 2;
  constexpr bool kOneAngle = (kDecodeWarps * 32) % kHalf == 0;
  const bool holds_new = begin <= last && last < end;
  float rope_cos = 0.0f, rope_sin = 0.0f;
  int64_t new_row = 0;
  if (inv_freq != nullptr) {
    new_row = ((int64_t(table[last / block_size]) * kv_heads + kv) * block_size + last % block_size) * kHeadDim;
    if (kOneAngle) {
      sincosf(static_cast<float>(last) * inv_freq[seq * kHalf + threadIdx.x % kHalf], &rope_sin, &rope_cos);
      rope_cos *= rope_scaling;
      rope_sin *= rope_scaling;
    }
  }
  wait_for_previous_kernel();
  if (early) allow_next_kernel();  // few blocks: the next GEMV's can load weights beside them

  __shared__ float q_shared[kGroup][kHeadDim];
  __shared__ float m_shared[L::kRowGroups][kGroup], l_shared[L::kRowGroups][kGroup];
  // The new token's rotated k and its v, as the cache holds them: the row
  // group that takes its position reads them here rather than back from the
  // cache it was just written to (a round trip through L2 on the critical path).
  __shared__ __align__(16) T kv_new_shared[2][kHeadDim];

  const float scale = rsqrtf(static_cast<float>(kHeadDim));
  const T* q_row = qkv + seq * qkv_size + int64_t(head0) * kHeadDim;
  if (L::kCodes || inv_freq == nullptr) {
    for (int i = threadIdx.x; i < count * kHeadDim; i += blockDim.x) {
      q_shared[i / kHeadDim][i % kHeadDim] = to_float(q_row[i]) * scale;
    }
  } else if constexpr (!L::kCodes) {
    // launch_rope_cache_write's rotation (the same f32 angle and rounding to
    // T) of the block's q heads and, in the pieces that hold the new token,
    // of its k, which goes to the cache with its v. Blocks of one KV head
    // (groups over 8) write the same values.
    const float* freq = inv_freq + seq * kHalf;
    const T* k_new = qkv + seq * qkv_size + int64_t(heads + kv) * kHeadDim;
    for (int i = threadIdx.x; i < (count + (holds_new ? 1 : 0)) * kHalf; i += blockDim.x) {
      const int h = i / kHalf, d = i % kHalf;
      float s = rope_sin, c = rope_cos;
      if (!kOneAngle) {
        sincosf(static_cast<float>(last) * freq[d], &s, &c);
        c *= rope_scaling;
        s *= rope_scaling;
      }
      const T* src = h < count ? q_row + h * kHeadDim : k_new;
      const float x1 = to_float(src[d]), x2 = to_float(src[d + kHalf]);
      const T r1 = from_float<T>(x1 * c - x2 * s), r2 = from_float<T>(x2 * c + x1 * s);
      if (h < count) {
        q_shared[h][d] = to_float(r1) * scale;
        q_shared[h][d + kHalf] = to_float(r2) * scale;
      } else {
        k_cache[new_row + d] = r1;
        k_cache[new_row + d + kHalf] = r2;
        kv_new_shared[0][d] = r1;
        kv_new_shared[0][d + kHalf] = r2;
      }
    }
    if (holds_new) {
      const T* v_new = qkv + seq * qkv_size + int64_t(heads + kv_heads + kv) * kHeadDim;
      for (int i = threadIdx.x; i < kHeadDim; i += blockDim.x) v_cache[new_row + i] = kv_new_shared[1][i] = v_new[i];
    }
  }
  __syncthreads();  // q_shared, and the new row in the cache and kv_new_shared, for the whole block

#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int32_t p = first_pass + u * kStep + row_in_warp;
    if (p == last && p < end) {
      const int64_t row = (int64_t(table[p / block_size]) * kv_heads + kv) * block_size + p % block_size;
      if (L::kCodes || inv_freq == nullptr) {
        load_row(u, row);  // the previous kernel wrote it
      } else if constexpr (!L::kCodes) {
#pragma unroll
        for (int j = 0; j < L::kLoads; ++j) {
          const int chunk = j * L::kLanes + li;
          if (chunk < L::kChunks) {
            kr[u][j] = *reinterpret_cast<const uint4*>(&kv_new_shared[0][chunk * L::kVec]);
            vr[u][j] = *reinterpret_cast<const uint4*>(&kv_new_shared[1][chunk * L::kVec]);
          }
        }
      }
      if constexpr (kUseRing) {  // into the ring slot the first pass skipped
        if (L::kCodes && li == 0) {
          *ring_params(0, u, 0) = kp[u];
          *ring_params(0, u, 1) = vp[u];
        }
#pragma unroll
        for (int j = 0; j < L::kLoads; ++j) {
          *ring_load(0, u, 0, j) = kr[u][j];
          *ring_load(0, u, 1, j) = vr[u][j];
        }
      }
    }
  }

  float q[kGroup][L::kPerLane], m[kGroup], l[kGroup], acc[kGroup][L::kPerLane];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = -FLT_MAX;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < L::kLoads; ++j) {
      const int chunk = j * L::kLanes + li;
#pragma unroll
      for (int e = 0; e < L::kVec; ++e) {
        q[g][j * L::kVec + e] = g < count && chunk < L::kChunks ? q_shared[g][chunk * L::kVec + e] : 0.0f;
        acc[g][j * L::kVec + e] = 0.0f;
      }
    }
  }

  // The loop bounds are the warp's, so every lane reaches the shuffles; rows
  // past `end` only skip updates.
  int stage = 0;
  for (int32_t pass = first_pass; pass < end; pass += kUnroll * kStep, stage ^= 1) {
    if constexpr (kUseRing) {
      // The stage refilled is the one the last pass read (into registers,
      // before this point: the fence keeps the compiler from sinking those
      // reads past the copies); then this pass's copies are waited for.
      // Code rows' params are copied by one lane and read by all the row's:
      // the warp syncs before that lane refills a stage and after its wait.
      if constexpr (L::kCodes) __syncwarp();
      asm volatile("" ::: "memory");
      issue_pass(stage ^ 1, pass + kUnroll * kStep, -1);
      cp_async_wait<1>();
      if constexpr (L::kCodes) __syncwarp();
      asm volatile("" ::: "memory");
    } else if (pass != first_pass) {
      load_pass(pass, -1);
    }
    // Row u's K or V load j as f32 (kv_index 0: K, 1: V).
    auto row_floats = [&](int u, int kv_index, int j, float* f) {
      if constexpr (kUseRing) {
        // Lanes past a row's loads (head_dim 96) never fill their slots: zeros,
        // as the register path holds, so 0 · q stays 0 in the dot product.
        const bool filled = j * L::kLanes + li < L::kChunks;
        cache_floats(filled ? *ring_load(stage, u, kv_index, j) : Load{}, f,
                     L::kCodes ? *ring_params(stage, u, kv_index) : make_float2(0.0f, 0.0f), C{});
      } else {
        cache_floats(kv_index == 0 ? kr[u][j] : vr[u][j], f, kv_index == 0 ? kp[u] : vp[u], C{});
      }
    };
    // Row u's score for each head: the lanes' dot products, summed over the row's lanes.
    auto row_dots = [&](int u, float* dots) {
      float k[L::kPerLane];
#pragma unroll
      for (int j = 0; j < L::kLoads; ++j) row_floats(u, 0, j, k + j * L::kVec);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        if (g >= count) break;
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < L::kPerLane; ++e) dot = fmaf(q[g][e], k[e], dot);
#pragma unroll
        for (int offset = L::kLanes / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
        dots[g] = dot;
      }
    };
    // The pass's scores first, then one rescale of each head's state for
    // the pass's largest: a row costs its weight's exponential and V's
    // multiply-adds, where rescaling at every row cost another exponential
    // and a multiply per element.
    float dots[kUnroll][kGroup];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bool step = pass + u * kStep < end;  // the same for the whole warp
      const bool valid = pass + u * kStep + row_in_warp < end;
      if (step) row_dots(u, dots[u]);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) dots[u][g] = valid ? dots[u][g] : -INFINITY;
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      if (g >= count) break;
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) m_new = fmaxf(m_new, dots[u][g]);
      const float correction = __expf(m[g] - m_new);
      l[g] *= correction;
#pragma unroll
      for (int e = 0; e < L::kPerLane; ++e) acc[g][e] *= correction;
      m[g] = m_new;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (pass + u * kStep + row_in_warp >= end) continue;  // garbage V past the end must not reach acc
      float v[L::kPerLane];
#pragma unroll
      for (int j = 0; j < L::kLoads; ++j) row_floats(u, 1, j, v + j * L::kVec);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        if (g >= count) break;
        const float weight = __expf(dots[u][g] - m[g]);
        l[g] += weight;
#pragma unroll
        for (int e = 0; e < L::kPerLane; ++e) acc[g][e] = fmaf(weight, v[e], acc[g][e]);
      }
    }

  }

  if constexpr (kUseRing) {
    cp_async_wait<0>();  // the last pass's group (past the end: empty)
    __syncthreads();     // every warp is done with the ring acc_shared reuses
  }
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (g >= count) break;
    if (li == 0) {
      m_shared[row_group][g] = m[g];
      l_shared[row_group][g] = l[g];
    }
#pragma unroll
    for (int j = 0; j < L::kLoads; ++j) {
      const int chunk = j * L::kLanes + li;
      if (chunk < L::kChunks) {
#pragma unroll
        for (int e = 0; e < L::kVec; ++e) acc_shared[row_group][g][chunk * L::kVec + e] = acc[g][j * L::kVec + e];
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < count * kHeadDim; i += blockDim.x) {
    const int g = i / kHeadDim, d = i % kHeadDim;
    float m_all = -FLT_MAX;
    for (int r = 0; r < L::kRowGroups; ++r) m_all = fmaxf(m_all, m_shared[r][g]);
    float l_all = 0.0f, value = 0.0f;
    for (int r = 0; r < L::kRowGroups; ++r) {
      const float w = l_shared[r][g] > 0.0f ? __expf(m_shared[r][g] - m_all) : 0.0f;
      l_all += l_shared[r][g] * w;
      value += acc_shared[r][g][d] * w;
    }
    const int64_t head = head0 + g;
    if (used == 1) {  // this block has the whole range
      out[(seq * heads + head) * kHeadDim + d] = from_float<T>(value / l_all);
    } else {
      float* slot = partial + ((seq * heads + head) * num_splits + split) * (kHeadDim + 1);
      slot[d] = l_all > 0.0f ? value / l_all : 0.0f;
      if (d == 0) slot[kHeadDim] = l_all > 0.0f ? m_all + __logf(l_all) : -INFINITY;
    }
  }
  if (used == 1) return;

  // The last piece to arrive weighs them all (the threadfence-reduction
  // pattern: each block's slots are visible device-wide before it counts).
  __shared__ bool last_to_arrive;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    int32_t* counter = arrivals + seq * gridDim.y + blockIdx.y;
    last_to_arrive = atomicAdd(counter, 1) == used - 1;
    if (last_to_arrive) *counter = 0;  // every piece has counted: ready for the next launch
  }
  __syncthreads();
  if (!last_to_arrive) return;
  __threadfence();
  // Each thread weighs the pieces for its output elements itself, reading a
  // batch of pieces' log-sum-exps and values together: one round trip to L2
  // per batch (most steps need one), where reading the log-sum-exps first
  // and the values after a barrier took two.
  constexpr int kElems = (kGroup * kHeadDim + kThreads - 1) / kThreads;
  constexpr int kBatch = 8;
  float run_max[kElems], total[kElems], value[kElems];
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
    run_max[e] = -INFINITY;
    total[e] = value[e] = 0.0f;
  }
  for (int s0 = 0; s0 < used; s0 += kBatch) {
    float lse[kElems][kBatch], v[kElems][kBatch];
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      const int i = threadIdx.x + e * kThreads, g = i / kHeadDim, d = i % kHeadDim;
      const float* slots = partial + (seq * heads + head0 + g) * num_splits * int64_t(kHeadDim + 1);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const bool in = i < count * kHeadDim && s0 + j < used;
        lse[e][j] = in ? __ldcg(slots + (s0 + j) * (kHeadDim + 1) + kHeadDim) : -INFINITY;
        v[e][j] = in ? __ldcg(slots + (s0 + j) * (kHeadDim + 1) + d) : 0.0f;
      }
    }
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      float batch_max = run_max[e];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) batch_max = fmaxf(batch_max, lse[e][j]);
      if (batch_max == -INFINITY) continue;
      const float correction = __expf(run_max[e] - batch_max);  // 0 while run_max is -inf
      total[e] *= correction;
      value[e] *= correction;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const float w = lse[e][j] == -INFINITY ? 0.0f : __expf(lse[e][j] - batch_max);
        total[e] += w;
        value[e] = fmaf(w, v[e][j], value[e]);
      }
      run_max[e] = batch_max;
    }
  }
#pragma unroll
  for (int e = 0; e < kElems; ++e) {
    const int i = threadIdx.x + e * kThreads;
    if (i < count * kHeadDim) out[(seq * heads + head0) * kHeadDim + i] = from_float<T>(value[e] / total[e]);
  }
}

// Unless TESSERA_DECODE_RING=0: K/V through the shared-memory ring.
bool decode_ring() {
  static const bool on = [] {
    const char* setting = std::getenv("TESSERA_DECODE_RING");
    return !(setting && std::string(setting) == "0");
  }();
  return on;
}

template <typename T, typename C, int kHeadDim>
void launch_split(const T* qkv, const int32_t* positions, const int32_t* block_tables, int32_t max_blocks_per_seq,
                  int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t block_size, int64_t window,
                  int64_t num_splits, C* k_cache, C* v_cache, const float2* k_params, const float2* v_params,
                  float* partial, int32_t* arrivals, T* out, cudaStream_t stream, const DecodeRope& rope) {
  const int64_t group = heads / kv_heads;
  const int64_t chunks_per_group = (group + kMaxGroup - 1) / kMaxGroup;
  const dim3 grid(static_cast<unsigned>(num_splits), static_cast<unsigned>(kv_heads * chunks_per_group),
                  static_cast<unsigned>(num_seqs));
  auto launch = [&](auto kernel) {
    launch_after(kernel, grid, kDecodeWarps * 32, 0, stream, qkv, positions, block_tables, max_blocks_per_seq,
                 static_cast<int>(heads), static_cast<int>(kv_heads), static_cast<int>(block_size),
                 static_cast<int>(window), k_cache, v_cache, k_params, v_params, partial, arrivals, out,
                 rope.inv_freq, rope.scaling, early_successor_launch() && programmatic_launch_enabled());
  };
  auto for_group = [&](auto ring) {
    constexpr bool kRing = decltype(ring)::value;
    if (group == 1) return launch(decode_attention_kernel<T, C, kHeadDim, 1, kRing>);
    if (group == 2) return launch(decode_attention_kernel<T, C, kHeadDim, 2, kRing>);
    if (group <= 4) return launch(decode_attention_kernel<T, C, kHeadDim, 4, kRing>);
    launch(decode_attention_kernel<T, C, kHeadDim, kMaxGroup, kRing>);
  };
  if (decode_ring()) return for_group(std::true_type{});
  for_group(std::false_type{});
}

// Checks the buffers and picks the kernel for head_dim.
template <typename T, typename C>
void launch_decode(const T* qkv, const int32_t* positions, const int32_t* block_tables, int32_t max_blocks_per_seq,
                   int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t block_size,
                   int64_t window, const DecodeSplits& splits, C* k_cache, C* v_cache, const float2* k_params,
                   const float2* v_params, float* partial, int32_t* arrivals, T* out, cudaStream_t stream,
                   const DecodeRope& rope) {
  if (num_seqs == 0) return;
  if (splits.num_splits > 1 && (partial == nullptr || arrivals == nullptr)) {
    throw Error(ErrorKind::kInternal, "decode attention: several splits need a partial buffer and arrival counters");
  }
  if (splits.num_splits > kMaxSplits) {
    throw Error(ErrorKind::kInternal, "decode attention: at most " + std::to_string(kMaxSplits) + " splits");
  }
#define TESSERA_DECODE_CASE(D)                                                                                    \
  case D:                                                                                                         \
    launch_split<T, C, D>(qkv, positions, block_tables, max_blocks_per_seq, num_seqs, heads, kv_heads,           \
                          block_size, window, splits.num_splits, k_cache, v_cache, k_params, v_params, partial,  \
                          arrivals, out, stream, rope);                                                          \
    break;
  switch (head_dim) {
    TESSERA_DECODE_CASE(8)
    TESSERA_DECODE_CASE(16)
    TESSERA_DECODE_CASE(32)
    TESSERA_DECODE_CASE(64)
    TESSERA_DECODE_CASE(96)
    TESSERA_DECODE_CASE(128)
    TESSERA_DECODE_CASE(256)
    default:
      throw Error(ErrorKind::kUnsupported, "CUDA decode attention has no kernel for head_dim " + std::to_string(head_dim),
                  "supported head dims: 8, 16, 32, 64, 96, 128, 256; use --device cpu for this model");
  }
#undef TESSERA_DECODE_CASE
  TESSERA_CUDA_CHECK_LAUNCH();
}

}  // namespace

DecodeSplits plan_decode_splits(int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t max_context,
                                int64_t multiprocessors) {
  constexpr int64_t kMinTokensPerSplit = kMinSplit;
  const int64_t group = heads / kv_heads;
  const int64_t blocks = num_seqs * kv_heads * ((group + kMaxGroup - 1) / kMaxGroup);
  // Two blocks per SM: with K/V through the ring, four or eight (smaller
  // pieces, more of them) were no faster at 64 sequences (docs/BENCHMARKS.md).
  const int64_t wanted = (2 * multiprocessors + blocks - 1) / blocks;
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, (max_context + kMinTokensPerSplit - 1) / kMinTokensPerSplit));
  const int64_t splits = std::clamp<int64_t>(wanted, 1, most);
  DecodeSplits plan;
  plan.tokens_per_split = (max_context + splits - 1) / splits;
  plan.tokens_per_split = std::max<int64_t>(16, (plan.tokens_per_split + 15) / 16 * 16);
  plan.num_splits = (max_context + plan.tokens_per_split - 1) / plan.tokens_per_split;
  return plan;
}

int64_t decode_arrival_counters(int64_t num_seqs, int64_t heads, int64_t kv_heads) {
  return num_seqs * kv_heads * ((heads / kv_heads + kMaxGroup - 1) / kMaxGroup);
}

template <typename T>
void launch_decode_attention(const T* qkv, const int32_t* positions, const int32_t* block_tables,
                             int32_t max_blocks_per_seq, int64_t num_seqs, int64_t heads, int64_t kv_heads,
                             int64_t head_dim, int64_t block_size, int64_t window, const DecodeSplits& splits,
                             T* k_cache, T* v_cache, float* partial, int32_t* arrivals, T* out, cudaStream_t stream,
                             const DecodeRope& rope) {
  launch_decode<T, T>(qkv, positions, block_tables, max_blocks_per_seq, num_seqs, heads, kv_heads, head_dim,
                      block_size, window, splits, k_cache, v_cache, nullptr, nullptr, partial, arrivals, out, stream,
                      rope);
}

template <typename T>
void launch_decode_attention_quantized(const T* qkv, const int32_t* positions, const int32_t* block_tables,
                                       int32_t max_blocks_per_seq, int64_t num_seqs, int64_t heads,
                                       int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t window,
                                       const DecodeSplits& splits, const QuantizedKvLayer& cache, float* partial,
                                       int32_t* arrivals, T* out, cudaStream_t stream) {
  with_typed_codes(cache, [&](auto* k_codes, auto* v_codes) {
    launch_decode<T>(qkv, positions, block_tables, max_blocks_per_seq, num_seqs, heads, kv_heads, head_dim,
                     block_size, window, splits, k_codes, v_codes, cache.k_params, cache.v_params, partial, arrivals,
                     out, stream, DecodeRope{});
  });
}

#define INSTANTIATE(T)                                                                                               \
  template void launch_decode_attention<T>(const T*, const int32_t*, const int32_t*, int32_t, int64_t, int64_t,     \
                                           int64_t, int64_t, int64_t, int64_t, const DecodeSplits&, T*, T*, float*,  \
                                           int32_t*, T*, cudaStream_t, const DecodeRope&);                           \
  template void launch_decode_attention_quantized<T>(const T*, const int32_t*, const int32_t*, int32_t, int64_t,    \
                                                     int64_t, int64_t, int64_t, int64_t, int64_t,                    \
                                                     const DecodeSplits&, const QuantizedKvLayer&, float*, int32_t*, \
                                                     T*, cudaStream_t);
TESSERA_FOR_EACH_CUDA_TYPE(INSTANTIATE)
#undef INSTANTIATE

}  // namespace tessera::backend::cuda
