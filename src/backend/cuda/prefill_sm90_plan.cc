#include <algorithm>
#include <functional>
#include <queue>
#include <string>
#include <utility>

#include "backend/cuda/prefill_sm90.h"
#include "core/error.h"

namespace tessera::backend::cuda {

std::vector<int32_t> Sm90PrefillPlan::packed() const {
  std::vector<int32_t> all(work_indptr);
  for (const std::vector<int32_t>* v :
       {&qo_tile_indices, &qo_indptr, &kv_indptr, &qo_lens, &kv_lens, &head_indices, &batch_indices}) {
    all.insert(all.end(), v->begin(), v->end());
  }
  return all;
}

Sm90PrefillDevicePlan sm90_device_plan(const Sm90PrefillPlan& plan, const int32_t* packed) {
  const int64_t items = plan.items();
  Sm90PrefillDevicePlan p;
  p.work_indptr = packed;
  const int32_t* next = packed + plan.work_indptr.size();
  for (const int32_t** field : {&p.qo_tile_indices, &p.qo_indptr, &p.kv_indptr, &p.qo_lens, &p.kv_lens,
                                &p.head_indices, &p.batch_indices}) {
    *field = next;
    next += items;
  }
  return p;
}

Sm90PrefillPlan plan_sm90_prefill(const std::vector<int32_t>& query_start, const std::vector<int32_t>& positions,
                                  int32_t max_blocks_per_seq, int64_t heads, int64_t blocks) {
  struct Tile {
    int64_t cost;
    int32_t seq, tile, qo_len, kv_len;
  };
  std::vector<Tile> tiles;
  const int64_t seqs = static_cast<int64_t>(query_start.size()) - 1;
  for (int64_t s = 0; s < seqs; ++s) {
    const int32_t begin = query_start[s], end = query_start[s + 1], qo_len = end - begin;
    if (qo_len <= 0) continue;
    const int32_t kv_len = positions[end - 1] + 1;
    for (int32_t t = begin; t < end; ++t) {
      if (positions[t] != kv_len - qo_len + (t - begin)) {
        throw Error(ErrorKind::kInternal, "sm_90 prefill plan: sequence " + std::to_string(s) +
                                              "'s new tokens are not the last of its context");
      }
    }
    const int32_t count = (qo_len + kSm90PrefillQueryTile - 1) / kSm90PrefillQueryTile;
    for (int32_t tile = 0; tile < count; ++tile) {
      // Keys the causal mask lets the tile's last row see, plus a fixed cost
      // for loading its queries and storing its rows.
      const int64_t keys = std::min<int64_t>(kv_len, kv_len - qo_len + int64_t{tile + 1} * kSm90PrefillQueryTile);
      tiles.push_back({keys + kSm90PrefillQueryTile, static_cast<int32_t>(s), tile, qo_len, kv_len});
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.cost > b.cost; });

  // Longest first, each to the least loaded block (ties: the lower index).
  using Load = std::pair<int64_t, int64_t>;  // (work so far, block)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loads;
  for (int64_t b = 0; b < blocks; ++b) loads.push({0, b});
  std::vector<std::vector<std::pair<const Tile*, int32_t>>> per_block(blocks);
  for (const Tile& tile : tiles) {
    for (int32_t head = 0; head < heads; ++head) {
      auto [load, b] = loads.top();
      loads.pop();
      per_block[b].push_back({&tile, head});
      loads.push({load + tile.cost, b});
    }
  }
  Sm90PrefillPlan plan;
  plan.work_indptr.assign(blocks + 1, 0);
  for (int64_t b = 0; b < blocks; ++b) {
    plan.work_indptr[b + 1] = plan.work_indptr[b] + static_cast<int32_t>(per_block[b].size());
    for (const auto& [tile, head] : per_block[b]) {
      plan.qo_tile_indices.push_back(tile->tile);
      plan.qo_indptr.push_back(query_start[tile->seq]);
      plan.kv_indptr.push_back(tile->seq * max_blocks_per_seq);
      plan.qo_lens.push_back(tile->qo_len);
      plan.kv_lens.push_back(tile->kv_len);
      plan.head_indices.push_back(head);
      plan.batch_indices.push_back(tile->seq);
    }
  }
  return plan;
}

#ifdef TESSERA_WITH_FLASHINFER
bool sm90_prefill_built() { return true; }
#else
bool sm90_prefill_built() { return false; }

void launch_prefill_attention_sm90(const __nv_bfloat16*, const Sm90PrefillDevicePlan&, int64_t, const int32_t*, int64_t,
                                   int64_t, int64_t, int64_t, const __nv_bfloat16*, const __nv_bfloat16*,
                                   __nv_bfloat16*, cudaStream_t) {
  throw Error(ErrorKind::kInternal, "this build has no sm_90 prefill attention (FlashInfer headers not found)");
}
#endif

}  // namespace tessera::backend::cuda
