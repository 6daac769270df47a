// Random models are made on every core in chunks with generators of their
// own (random_weights.cc): the values must not depend on how many threads
// made them, or two models of one seed (the graph tests' pairs) would differ.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <vector>

#include "../decode_graph_schedule.h"
#include "backend/backend.h"
#include "model/random_weights.h"

namespace tessera {
namespace {

// Restores OpenMP's thread count when a test ends.
class ThreadCount {
 public:
  ThreadCount() : saved_(omp_get_max_threads()) {}
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(RandomWeights, QuantizedWeightIsTheSameWhateverTheThreadCount) {
  ThreadCount restore;
  // 2048 × 8192 inputs: 2M packed words, two chunks of the generator.
  omp_set_num_threads(1);
  const backend::QuantizedWeight one = model::random_quantized_weight(2048, 8192, 128, 0.02, 5);
  omp_set_num_threads(3);
  const backend::QuantizedWeight three = model::random_quantized_weight(2048, 8192, 128, 0.02, 5);
  const backend::QuantizedWeight other_seed = model::random_quantized_weight(2048, 8192, 128, 0.02, 6);
  EXPECT_TRUE(same_bytes(one.qweight, three.qweight));
  EXPECT_TRUE(same_bytes(one.scales, three.scales));
  EXPECT_TRUE(same_bytes(one.zeros, three.zeros));
  EXPECT_FALSE(same_bytes(one.qweight, other_seed.qweight));  // the comparison can fail
  // The two chunks are not one chunk's values twice.
  const auto* words = one.qweight.data<int32_t>();
  EXPECT_NE(std::memcmp(words, words + (int64_t(1) << 20), 4096), 0);
}

TEST(RandomWeights, ModelLogitsAreTheSameWhateverTheThreadCountAndDifferBySeed) {
  ThreadCount restore;
  const model::ModelSpec spec = testing::small_spec();  // gate_up 4096 × 768: three chunks
  std::unique_ptr<backend::Backend> cpu = backend::make_cpu_backend();
  omp_set_num_threads(1);
  auto serial = model::make_random_transformer(spec, *cpu, 11);
  omp_set_num_threads(3);
  auto parallel = model::make_random_transformer(spec, *cpu, 11);
  auto other_seed = model::make_random_transformer(spec, *cpu, 12);
  omp_set_num_threads(1);  // the forwards alike, so only the weights can differ

  auto logits = [&](model::Transformer& model) {
    backend::PagedKvCache cache = model.allocate_cache(4, testing::kBlockSize);
    model::ForwardBatch batch;
    batch.token_ids = {3, 141, 59, 26};
    batch.attention.positions = {0, 1, 2, 3};
    batch.attention.query_start = {0, 4};
    batch.attention.block_tables = {0};
    batch.attention.max_blocks_per_seq = 1;
    batch.logit_rows = {3};
    return model.forward(batch, cache);
  };
  const Tensor a = logits(*serial), b = logits(*parallel), c = logits(*other_seed);
  EXPECT_TRUE(same_bytes(a, b));
  EXPECT_FALSE(same_bytes(a, c));
}

}  // namespace
}  // namespace tessera
