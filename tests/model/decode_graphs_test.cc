// model::DecodeGraphs on the CPU, through a test double of a backend with
// device graphs: the CPU backend's ops, recorded as closures while capturing
// and replayed in order, reading their host inputs (token ids, rows, RoPE
// frequencies, the attention batch) from what the last forward or staging
// left — as the CUDA backend's recorded kernels read its upload buffers. So
// the model layer's part (which steps take a graph, padding to buckets,
// staging before a replay, the spare block) is checked on every build; the
// CUDA backend's own recording is checked by tests/cuda/decode_graphs_test.cc.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "../decode_graph_schedule.h"
#include "../forwarding_cpu_backend.h"
#include "backend/backend.h"
#include "model/decode_graphs.h"
#include "model/random_weights.h"

namespace tessera {
namespace {

class RecordedGraph final : public backend::DeviceGraph {
 public:
  std::vector<std::function<void()>> ops;
  void replay() override {
    for (auto& op : ops) op();
  }
};

class RecordingCpuBackend final : public testing::ForwardingCpuBackend {
 public:
  void synchronize() override {}

  // Host inputs: kept as the last forward or staging gave them (a device's
  // upload buffers); recorded ops read them when replayed.
  void prepare(const backend::AttentionBatch& batch) override {
    if (!capturing_) batch_ = batch;
  }
  void embedding(const Tensor& table, const std::vector<int32_t>& ids, Tensor& out) override {
    if (!capturing_) ids_ = ids;
    run([this, table, out]() mutable { cpu().embedding(table, ids_, out); });
  }
  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    if (!capturing_) rows_ = rows;
    run([this, x, out]() mutable { cpu().gather_rows(x, rows_, out); });
  }
  void rope_and_cache_write(Tensor& qkv, int64_t num_heads, const std::vector<float>& inv_freq,
                            float attention_scaling, const backend::AttentionBatch&, backend::PagedKvLayer& cache,
                            int64_t block_size) override {
    if (!capturing_) inv_freq_ = inv_freq;
    backend::PagedKvLayer* layer = &cache;
    run([this, qkv, num_heads, attention_scaling, layer, block_size]() mutable {
      cpu().rope_and_cache_write(qkv, num_heads, inv_freq_, attention_scaling, batch_, *layer, block_size);
    });
  }
  void paged_attention(const Tensor& qkv, int64_t num_heads, const backend::AttentionBatch&,
                       const backend::PagedKvLayer& cache, int64_t block_size, Tensor& out) override {
    const backend::PagedKvLayer* layer = &cache;
    run([this, qkv, num_heads, layer, block_size, out]() mutable {
      cpu().paged_attention(qkv, num_heads, batch_, *layer, block_size, out);
    });
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    run([this, x, weight, eps, out]() mutable { cpu().rms_norm(x, weight, eps, out); });
  }
  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    run([this, residual, x, weight, eps, out]() mutable { cpu().add_rms_norm(residual, x, weight, eps, out); });
  }
  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out) override {
    run([this, x, weight, bias, out]() mutable { cpu().linear(x, weight, bias, out); });
  }
  void silu_mul(const Tensor& gate_up, Tensor& out) override {
    run([this, gate_up, out]() mutable { cpu().silu_mul(gate_up, out); });
  }
  void add(Tensor& x, const Tensor& y) override {
    run([this, x, y]() mutable { cpu().add(x, y); });
  }

  bool supports_graphs() const override { return true; }
  void begin_capture() override {
    capturing_ = true;
    graph_ = std::make_unique<RecordedGraph>();
  }
  std::unique_ptr<backend::DeviceGraph> end_capture() override {
    capturing_ = false;
    return std::move(graph_);
  }
  void set_staging(bool staging) override { staging_ = staging; }

 private:
  // Runs an op now, records it, or (staging) leaves it for the replay.
  void run(std::function<void()> op) {
    if (capturing_) {
      graph_->ops.push_back(std::move(op));
    } else if (!staging_) {
      op();
    }
  }

  bool capturing_ = false, staging_ = false;
  std::unique_ptr<RecordedGraph> graph_;
  backend::AttentionBatch batch_;
  std::vector<int32_t> ids_, rows_;
  std::vector<float> inv_freq_;
};

// f32 on the CPU: the padded rows change OpenBLAS's blocking, nothing else.
constexpr double kMaxAbs = 1e-4, kRelNorm = 1e-5;

testing::Outcome run_schedule(int64_t spare_override) {
  const model::ModelSpec spec = testing::small_spec();
  RecordingCpuBackend recording;
  auto cpu = backend::make_cpu_backend();
  auto graphs = model::make_random_transformer(spec, recording, 7);
  auto eager = model::make_random_transformer(spec, *cpu, 7);
  return testing::run_decode_schedule(graphs.get(), eager.get(), spare_override);
}

TEST(modelDecodeGraphs, ReplayedStepsEqualStepsRunOneByOne) {
  const testing::Outcome outcome = run_schedule(-1);
  EXPECT_TRUE(outcome.graphs_on);
  // 53 decode steps in buckets 8, 4, 4, 16, 4 and 1: each phase's first step
  // runs and is recorded (bucket 4 again because bucket 16 replaced the
  // logits buffer) but the third's, whose graph was recorded by the second;
  // the other 48 replay (no buffer of this double moves).
  EXPECT_EQ(outcome.graph_replays, 48);
  EXPECT_GT(outcome.replay_host_seconds, 0.0);  // bench decode's host column: staging and launch were timed
  EXPECT_TRUE(outcome.worst.within(kMaxAbs, kRelNorm)) << outcome.worst.describe();
}

TEST(modelDecodeGraphs, PaddingIntoAnOwnedBlockIsCaught) {
  const testing::Outcome outcome = run_schedule(testing::kBlocksPerSeq);
  EXPECT_FALSE(outcome.worst.within(kMaxAbs, kRelNorm)) << "the planted bug went unseen: " << outcome.worst.describe();
}

// A dynamic-NTK model's RoPE frequencies grow past its trained context. When
// the one long sequence of a bucket leaves and the others, all within the
// context, go on in the same bucket, the frequencies the last staging left
// on the device are the long sequence's: the replay must stage them anew.
TEST(modelDecodeGraphs, ShortSequencesAfterALongOneOfADynamicNtkModelGetTheirOwnFrequencies) {
  model::ModelSpec spec = testing::small_spec();
  spec.max_position_embeddings = 100;
  spec.rope_scaling.type = model::RopeScalingType::kDynamic;
  spec.rope_scaling.factor = 2.0;
  RecordingCpuBackend recording;
  auto cpu = backend::make_cpu_backend();
  auto graphs = model::make_random_transformer(spec, recording, 7);
  auto eager = model::make_random_transformer(spec, *cpu, 7);
  eager->set_graphs_enabled(false);
  constexpr int64_t kSeqs = 4;
  backend::PagedKvCache graph_cache = graphs->allocate_cache(kSeqs * testing::kBlocksPerSeq, testing::kBlockSize);
  backend::PagedKvCache eager_cache = eager->allocate_cache(kSeqs * testing::kBlocksPerSeq, testing::kBlockSize);
  // Sequence 0 past the trained context; every block table 5-8 blocks wide
  // (one width bucket) throughout.
  const int64_t lengths[kSeqs] = {108, 70, 75, 80};
  std::vector<testing::ScheduledSequence> seqs(kSeqs);
  for (int64_t s = 0; s < kSeqs; ++s) {
    for (int64_t i = 0; i < lengths[s]; ++i) seqs[s].tokens.push_back(static_cast<int32_t>((s * 131 + i * 17) % 1000));
    const model::ForwardBatch batch = testing::step_batch(seqs, {s}, true);
    Tensor logits = eager->forward(batch, eager_cache);
    graphs->forward(batch, graph_cache);
    seqs[s].computed = lengths[s];
    seqs[s].tokens.push_back(testing::argmax(logits.data<float>(), logits.dim(1)));
  }
  testing::Closeness worst;
  auto decode = [&](const std::vector<int64_t>& active) {
    for (int step = 0; step < 3; ++step) {
      const model::ForwardBatch batch = testing::step_batch(seqs, active, false);
      Tensor want = eager->forward(batch, eager_cache);
      Tensor got = graphs->forward(batch, graph_cache);
      const testing::Closeness c = testing::compare(got.data<float>(), want.data<float>(), want.numel());
      worst.max_abs = std::max(worst.max_abs, c.max_abs);
      worst.rel_norm = std::max(worst.rel_norm, c.rel_norm);
      for (size_t i = 0; i < active.size(); ++i) {
        testing::ScheduledSequence& q = seqs[active[i]];
        q.computed = static_cast<int64_t>(q.tokens.size());
        q.tokens.push_back(testing::argmax(want.data<float>() + i * want.dim(1), want.dim(1)));
      }
    }
  };
  decode({0, 1, 2, 3});  // bucket 4: recorded, then replayed
  decode({1, 2, 3});     // bucket 4 again, sequence 0 gone, nothing run between
  EXPECT_EQ(graphs->graph_replays(), 5);
  EXPECT_TRUE(worst.within(kMaxAbs, kRelNorm)) << worst.describe();
}

TEST(modelDecodeGraphs, OnlyDecodeStepsOfAGraphBackendTakeGraphs) {
  RecordingCpuBackend recording;
  auto model = model::make_random_transformer(testing::small_spec(), recording, 7);
  backend::PagedKvCache cache = model->allocate_cache(8, testing::kBlockSize);
  model::DecodeGraphs graphs(recording, 1000);
  model::ForwardBatch prefill;  // 3 tokens of one sequence
  prefill.token_ids = {1, 2, 3};
  prefill.attention.positions = {0, 1, 2};
  prefill.attention.query_start = {0, 3};
  prefill.attention.block_tables = {0};
  prefill.attention.max_blocks_per_seq = 1;
  prefill.logit_rows = {2};
  EXPECT_FALSE(graphs.applies(prefill, cache));
  model::ForwardBatch decode = prefill;  // one token each of two sequences
  decode.token_ids = {4, 5};
  decode.attention.positions = {3, 7};
  decode.attention.query_start = {0, 1, 2};
  decode.attention.block_tables = {0, 1};
  decode.logit_rows = {0, 1};
  EXPECT_TRUE(graphs.applies(decode, cache));
  decode.logit_rows = {1};  // a row without logits
  EXPECT_FALSE(graphs.applies(decode, cache));
  decode.logit_rows = {0, 1};
  backend::PagedKvCache no_spare = cache;
  no_spare.spare_block = -1;
  EXPECT_FALSE(graphs.applies(decode, no_spare));
  graphs.set_enabled(false);
  EXPECT_FALSE(graphs.applies(decode, cache));
  auto cpu = backend::make_cpu_backend();
  EXPECT_FALSE(model::DecodeGraphs(*cpu, 1000).enabled()) << "the CPU backend records no graphs";
}

}  // namespace
}  // namespace tessera
