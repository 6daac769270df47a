// The host side of FlashInfer's sm_90a prefill kernel: when it is chosen
// (backend/cuda/prefill_kernel_choice.h) and its work plan
// (backend/cuda/prefill_sm90.h). Needs no GPU: it runs wherever the CUDA
// backend is built. A plan is right when every (query head, 128-row query
// tile) of every sequence with new tokens is listed exactly once, with its
// sequence's offsets and lengths, and the thread blocks' work is balanced as
// longest-first assignment guarantees (no block more than one item over the
// least loaded).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "backend/cuda/prefill_kernel_choice.h"
#include "backend/cuda/prefill_sm90.h"
#include "core/error.h"

namespace tessera::backend::cuda {
namespace {

struct Step {
  std::vector<int32_t> query_start, positions;
  int32_t max_blocks_per_seq = 0;
};

// Sequences given as (context after the step, new tokens).
Step make_step(const std::vector<std::pair<int32_t, int32_t>>& seqs, int32_t max_blocks_per_seq) {
  Step step;
  step.max_blocks_per_seq = max_blocks_per_seq;
  step.query_start = {0};
  for (const auto& [context, fresh] : seqs) {
    for (int32_t p = context - fresh; p < context; ++p) step.positions.push_back(p);
    step.query_start.push_back(static_cast<int32_t>(step.positions.size()));
  }
  return step;
}

int64_t tile_cost(int32_t qo_len, int32_t kv_len, int32_t tile) {
  return std::min<int64_t>(kv_len, kv_len - qo_len + int64_t{tile + 1} * kSm90PrefillQueryTile) +
         kSm90PrefillQueryTile;
}

// Empty when `plan` covers `step` rightly, else what is wrong.
std::string plan_errors(const Sm90PrefillPlan& plan, const Step& step, int64_t heads, int64_t blocks) {
  if (static_cast<int64_t>(plan.work_indptr.size()) != blocks + 1) return "work_indptr is not blocks + 1 long";
  if (plan.work_indptr.front() != 0 || plan.work_indptr.back() != plan.items()) return "work_indptr does not span the items";
  for (int64_t b = 0; b < blocks; ++b) {
    if (plan.work_indptr[b + 1] < plan.work_indptr[b]) return "work_indptr decreases at block " + std::to_string(b);
  }
  std::map<std::tuple<int32_t, int32_t, int32_t>, int> seen;  // (seq, tile, head) -> times listed
  for (int64_t i = 0; i < plan.items(); ++i) {
    const int32_t seq = plan.batch_indices[i];
    const int32_t begin = step.query_start[seq], end = step.query_start[seq + 1];
    if (plan.qo_indptr[i] != begin) return "item " + std::to_string(i) + ": qo_indptr is not its sequence's first token";
    if (plan.kv_indptr[i] != seq * step.max_blocks_per_seq) return "item " + std::to_string(i) + ": kv_indptr";
    if (plan.qo_lens[i] != end - begin) return "item " + std::to_string(i) + ": qo_len";
    if (plan.kv_lens[i] != step.positions[end - 1] + 1) return "item " + std::to_string(i) + ": kv_len";
    ++seen[{seq, plan.qo_tile_indices[i], plan.head_indices[i]}];
  }
  size_t expected = 0;
  for (size_t s = 0; s + 1 < step.query_start.size(); ++s) {
    const int32_t fresh = step.query_start[s + 1] - step.query_start[s];
    const int32_t tiles = (fresh + kSm90PrefillQueryTile - 1) / kSm90PrefillQueryTile;
    for (int32_t t = 0; t < tiles; ++t) {
      for (int32_t h = 0; h < heads; ++h) {
        const auto it = seen.find({static_cast<int32_t>(s), t, h});
        if (it == seen.end()) return "missing: sequence " + std::to_string(s) + " tile " + std::to_string(t) + " head " + std::to_string(h);
        if (it->second != 1) return "listed " + std::to_string(it->second) + " times: sequence " + std::to_string(s);
        ++expected;
      }
    }
  }
  if (seen.size() != expected) return "items outside the step's tiles";
  // Balance: the most loaded block is at most one (largest) item over the least.
  int64_t most = 0, least = INT64_MAX, largest = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t load = 0;
    for (int32_t i = plan.work_indptr[b]; i < plan.work_indptr[b + 1]; ++i) {
      const int64_t cost = tile_cost(plan.qo_lens[i], plan.kv_lens[i], plan.qo_tile_indices[i]);
      load += cost;
      largest = std::max(largest, cost);
    }
    most = std::max(most, load);
    least = std::min(least, load);
  }
  if (most - least > largest) return "unbalanced: " + std::to_string(most) + " against " + std::to_string(least);
  return "";
}

TEST(Sm90PrefillPlan, ListsEveryHeadAndTileOnceAndBalancesTheBlocks) {
  struct Case {
    std::vector<std::pair<int32_t, int32_t>> seqs;
    int64_t heads, blocks;
  };
  const std::vector<Case> cases = {
      {{{4096, 4096}}, 32, 132},                            // the benchmark's prompt
      {{{1, 1}, {63, 63}, {128, 128}, {129, 129}}, 4, 7},   // tile edges
      {{{1000, 200}, {130, 65}, {70, 1}, {5, 2}}, 8, 132},  // chunks after cached tokens, a decode row
      {{{300, 0}, {50, 50}}, 2, 3},                         // a sequence without new tokens
      {{{2049, 2049}, {700, 300}}, 48, 1},                  // one block takes everything
  };
  for (const Case& c : cases) {
    const Step step = make_step(c.seqs, 40);
    const Sm90PrefillPlan plan = plan_sm90_prefill(step.query_start, step.positions, step.max_blocks_per_seq, c.heads, c.blocks);
    EXPECT_EQ(plan_errors(plan, step, c.heads, c.blocks), "") << c.seqs.size() << " sequences, " << c.heads << " heads";
    const std::vector<int32_t> packed = plan.packed();
    EXPECT_EQ(packed.size(), plan.work_indptr.size() + 7 * size_t(plan.items()));
    const Sm90PrefillDevicePlan device = sm90_device_plan(plan, packed.data());
    if (plan.items() > 0) {
      EXPECT_EQ(device.batch_indices[plan.items() - 1], plan.batch_indices.back());
      EXPECT_EQ(device.qo_tile_indices[0], plan.qo_tile_indices[0]);
    }
  }
}

// The checker is able to fail: an item listed twice (and so another missing),
// a wrong offset and a plan giving one block everything are each reported.
TEST(Sm90PrefillPlan, TheCheckerCatchesPlantedErrors) {
  const Step step = make_step({{600, 600}, {300, 100}}, 10);
  const Sm90PrefillPlan good = plan_sm90_prefill(step.query_start, step.positions, step.max_blocks_per_seq, 4, 5);
  ASSERT_EQ(plan_errors(good, step, 4, 5), "");
  Sm90PrefillPlan twice = good;
  twice.head_indices[1] = twice.head_indices[0];
  twice.qo_tile_indices[1] = twice.qo_tile_indices[0];
  twice.batch_indices[1] = twice.batch_indices[0];
  twice.qo_indptr[1] = twice.qo_indptr[0];
  twice.kv_indptr[1] = twice.kv_indptr[0];
  twice.qo_lens[1] = twice.qo_lens[0];
  twice.kv_lens[1] = twice.kv_lens[0];
  EXPECT_NE(plan_errors(twice, step, 4, 5), "");
  Sm90PrefillPlan offset = good;
  offset.qo_indptr[2] += 1;
  EXPECT_NE(plan_errors(offset, step, 4, 5), "");
  Sm90PrefillPlan unbalanced = good;
  // Everything to block 0.
  std::fill(unbalanced.work_indptr.begin() + 1, unbalanced.work_indptr.end(), static_cast<int32_t>(good.items()));
  EXPECT_NE(plan_errors(unbalanced, step, 4, 5), "");
}

TEST(Sm90PrefillPlan, NewTokensThatAreNotTheLastOfTheContextAreRefused) {
  Step step = make_step({{100, 10}}, 4);
  step.positions[3] += 1;  // a gap inside the chunk
  try {
    plan_sm90_prefill(step.query_start, step.positions, step.max_blocks_per_seq, 2, 4);
    FAIL() << "a gap in the positions was planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
}

// kAuto takes it exactly where it runs: bf16, head_dim 128, no window, a 9.0
// device, and a build that holds it; kScalar and kTensorCore never do.
TEST(Sm90PrefillChoice, AutoTakesItOnlyWhereItRuns) {
  const bool built = sm90_prefill_built();
  EXPECT_EQ(use_sm90_prefill(DType::kBF16, 128, 0, 90), built);
  EXPECT_FALSE(use_sm90_prefill(DType::kBF16, 128, 0, 89));   // an RTX 4090
  EXPECT_FALSE(use_sm90_prefill(DType::kBF16, 128, 0, 100));  // sm_90a code runs on 9.0 alone
  EXPECT_FALSE(use_sm90_prefill(DType::kF16, 128, 0, 90));
  EXPECT_FALSE(use_sm90_prefill(DType::kBF16, 64, 0, 90));
  EXPECT_FALSE(use_sm90_prefill(DType::kBF16, 128, 4096, 90));  // a sliding window
  set_prefill_attention_kernel(PrefillAttentionKernel::kTensorCore);
  EXPECT_FALSE(use_sm90_prefill(DType::kBF16, 128, 0, 90));
  set_prefill_attention_kernel(PrefillAttentionKernel::kScalar);
  EXPECT_FALSE(use_sm90_prefill(DType::kBF16, 128, 0, 90));
  set_prefill_attention_kernel(PrefillAttentionKernel::kAuto);
}

// Forced where it cannot run: refused, naming the reason.
TEST(Sm90PrefillChoice, ForcedWhereItCannotRunIsRefusedWithTheReason) {
  struct Case {
    DType dtype;
    int64_t head_dim, window;
    int capability;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {DType::kBF16, 128, 0, 89, "compute capability 8.9"},
      {DType::kF16, 128, 0, 90, "float16"},
      {DType::kBF16, 64, 0, 90, "head_dim 64"},
      {DType::kBF16, 128, 4096, 90, "sliding window"},
  };
  set_prefill_attention_kernel(PrefillAttentionKernel::kFlashInfer);
  for (const Case& c : cases) {
    try {
      use_sm90_prefill(c.dtype, c.head_dim, c.window, c.capability);
      ADD_FAILURE() << "forced FlashInfer was taken for " << c.reason;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
      // Without the kernel in the build, that is the reason given first.
      const std::string expected = sm90_prefill_built() ? c.reason : "no FlashInfer kernel";
      EXPECT_NE(e.message().find(expected), std::string::npos) << e.message();
    }
  }
  set_prefill_attention_kernel(PrefillAttentionKernel::kAuto);
}

}  // namespace
}  // namespace tessera::backend::cuda
