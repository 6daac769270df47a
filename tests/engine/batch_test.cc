// Several sequences of different lengths in one batch, prefilled (in chunks)
// and then decoded one token per sequence per step through shuffled paged
// blocks, must give the logits a single full prefill of each sequence gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "../compare.h"
#include "../model_runner.h"
#include "../test_paths.h"
#include "model/convert/demo_model.h"
#include "model/transformer.h"

namespace tessera {
namespace {

class BatchedForward : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tessera-batch-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
    model::RandomLlamaShape shape{64, 2, 4, 2, 96, 97, 256};
    model::write_random_llama(dir_, shape, 3);
    backend_ = backend::make_cpu_backend();
    model_ = model::load_transformer(dir_, *backend_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<model::Transformer> model_;
};

TEST_F(BatchedForward, ChunkedPrefillAndDecodeEqualFullPrefill) {
  const int64_t block_size = 4;
  const std::vector<int64_t> lengths = {9, 1, 23, 14};  // total tokens per sequence
  const std::vector<int64_t> prompt_lengths = {5, 1, 17, 6};
  const int64_t num_seqs = static_cast<int64_t>(lengths.size());
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> sequences;
  for (int64_t len : lengths) {
    std::vector<int32_t> ids(len);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % 97);
    sequences.push_back(ids);
  }
  // Physical blocks handed out in a shuffled order so tables are not contiguous.
  const int32_t max_blocks = 8;
  std::vector<int32_t> physical(num_seqs * max_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  backend::PagedKvCache cache = model_->allocate_cache(num_seqs * max_blocks, block_size);

  // logits_seen[s][p]: logits after position p of sequence s, from the batched run.
  std::vector<std::vector<std::vector<float>>> seen(num_seqs);
  std::vector<int64_t> computed(num_seqs, 0);
  auto step = [&](const std::vector<int64_t>& take) {
    model::ForwardBatch batch;
    batch.attention.max_blocks_per_seq = max_blocks;
    batch.attention.block_tables = physical;
    batch.attention.query_start = {0};
    std::vector<std::pair<int64_t, int64_t>> owners;  // (seq, position) of each token
    for (int64_t s = 0; s < num_seqs; ++s) {
      for (int64_t i = 0; i < take[s]; ++i) {
        const int64_t p = computed[s] + i;
        batch.token_ids.push_back(sequences[s][p]);
        batch.attention.positions.push_back(static_cast<int32_t>(p));
        batch.logit_rows.push_back(static_cast<int32_t>(owners.size()));
        owners.push_back({s, p});
      }
      batch.attention.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
      computed[s] += take[s];
    }
    Tensor logits = model_->forward(batch, cache);
    for (size_t r = 0; r < owners.size(); ++r) {
      auto [s, p] = owners[r];
      seen[s].resize(std::max<size_t>(seen[s].size(), p + 1));
      seen[s][p].assign(logits.data<float>() + r * logits.dim(1), logits.data<float>() + (r + 1) * logits.dim(1));
    }
  };
  // Prefill in two chunks (the second chunk attends to the first through the cache) ...
  std::vector<int64_t> first(num_seqs), second(num_seqs);
  for (int64_t s = 0; s < num_seqs; ++s) {
    first[s] = prompt_lengths[s] / 2;
    second[s] = prompt_lengths[s] - first[s];
  }
  step(first);
  step(second);
  // ... then one token per unfinished sequence per step.
  while (true) {
    std::vector<int64_t> take(num_seqs);
    bool any = false;
    for (int64_t s = 0; s < num_seqs; ++s) any |= (take[s] = computed[s] < lengths[s] ? 1 : 0) != 0;
    if (!any) break;
    step(take);
  }

  for (int64_t s = 0; s < num_seqs; ++s) {
    Tensor full = testing::prefill_all_logits(*model_, sequences[s]);
    for (int64_t p = 0; p < lengths[s]; ++p) {
      auto c = testing::compare(seen[s][p].data(), full.data<float>() + p * full.dim(1), full.dim(1));
      EXPECT_TRUE(c.within(1e-4, 1e-5)) << "sequence " << s << " position " << p << ": " << c.describe();
    }
  }
}

}  // namespace
}  // namespace tessera
