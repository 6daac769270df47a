// The shard of each canonical weight, checked row by row on tagged weights:
// which query and KV heads, MLP units and vocabulary rows each rank holds, KV
// heads replicated when there are fewer than ranks, and the sizes that work.
#include <gtest/gtest.h>

#include <tuple>
#include <utility>

#include "core/error.h"
#include "model/shard.h"

namespace tessera::model {
namespace {

ModelSpec spec_of(int64_t heads, int64_t kv_heads, int64_t intermediate = 12, int64_t vocab = 10) {
  ModelSpec spec;
  spec.hidden_size = 3;
  spec.num_heads = heads;
  spec.num_kv_heads = kv_heads;
  spec.head_dim = 2;
  spec.intermediate_size = intermediate;
  spec.vocab_size = vocab;
  return spec;
}

// [rows, width] with element (r, c) = r * 1000 + c.
Tensor tagged(int64_t rows, int64_t width) {
  Tensor t = Tensor::empty({rows, width}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) t.data<float>()[r * width + c] = static_cast<float>(r * 1000 + c);
  }
  return t;
}

std::vector<int64_t> row_tags(const Tensor& t) {
  std::vector<int64_t> rows;
  const int64_t width = t.rank() == 2 ? t.dim(1) : 1;
  for (int64_t r = 0; r < t.dim(0); ++r) rows.push_back(static_cast<int64_t>(t.data<float>()[r * width]) / 1000);
  return rows;
}

TEST(engineTpShard, ValidSizesDivideTheHeadsAndPairWithKvHeads) {
  EXPECT_EQ(valid_tp_sizes(spec_of(4, 1)), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(valid_tp_sizes(spec_of(8, 4)), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(valid_tp_sizes(spec_of(6, 2)), (std::vector<int>{1, 2, 6}));  // 3 would split a KV group
  EXPECT_EQ(valid_tp_sizes(spec_of(2, 2)), (std::vector<int>{1, 2}));
  try {
    check_tp_size(spec_of(6, 2), 3);
    ADD_FAILURE() << "tp 3 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("6 attention heads (2 KV heads)"), std::string::npos) << e.message();
    EXPECT_EQ(e.hint(), "tensor-parallel sizes that work for this model: 1, 2, 6");
  }
}

TEST(engineTpShard, QkvRowsAreTheRanksHeadsWithKvHeadsReplicated) {
  // 4 query heads, 2 KV heads, head_dim 2: rows q 0..7, k 8..11, v 12..15.
  const ModelSpec spec = spec_of(4, 2);
  const Tensor qkv = tagged(spec.qkv_size(), spec.hidden_size);
  // tp 2: one KV head each.
  EXPECT_EQ(row_tags(shard_weight(spec, make_tp_shard(spec, 1, 2), "layers.0.qkv", qkv)),
            (std::vector<int64_t>{4, 5, 6, 7, 10, 11, 14, 15}));
  // tp 4: query heads 0,1 use KV head 0 and heads 2,3 KV head 1, so ranks 0,1 hold KV head 0.
  const std::vector<std::vector<int64_t>> expected = {
      {0, 1, 8, 9, 12, 13}, {2, 3, 8, 9, 12, 13}, {4, 5, 10, 11, 14, 15}, {6, 7, 10, 11, 14, 15}};
  for (int r = 0; r < 4; ++r) {
    TpShard shard = make_tp_shard(spec, r, 4);
    EXPECT_EQ(shard.num_heads, 1);
    EXPECT_EQ(shard.num_kv_heads, 1);
    EXPECT_EQ(row_tags(shard_weight(spec, shard, "layers.3.qkv", qkv)), expected[r]) << "rank " << r;
    Tensor bias = tagged(spec.qkv_size(), 1).reshape({spec.qkv_size()});
    EXPECT_EQ(row_tags(shard_weight(spec, shard, "layers.3.qkv_bias", bias)), expected[r]) << "bias, rank " << r;
  }
}

TEST(engineTpShard, GateUpSplitsInsideEachHalfAndDownAndOSplitColumns) {
  const ModelSpec spec = spec_of(4, 2, /*intermediate=*/5);
  const Tensor gate_up = tagged(10, 3);  // gate 0..4 | up 5..9
  TpShard first = make_tp_shard(spec, 0, 2), second = make_tp_shard(spec, 1, 2);
  EXPECT_EQ(row_tags(shard_weight(spec, first, "layers.0.gate_up", gate_up)), (std::vector<int64_t>{0, 1, 5, 6}));
  EXPECT_EQ(row_tags(shard_weight(spec, second, "layers.0.gate_up", gate_up)),
            (std::vector<int64_t>{2, 3, 4, 7, 8, 9}));
  const Tensor down = tagged(3, 5);  // [hidden, intermediate]: columns 0..4
  Tensor down_shard = shard_weight(spec, second, "layers.0.down", down);
  ASSERT_EQ(down_shard.shape(), (Shape{3, 3}));
  EXPECT_EQ(down_shard.data<float>()[0], 2.0f);
  EXPECT_EQ(down_shard.data<float>()[3 * 2 + 2], 2004.0f);
  const Tensor o = tagged(3, 8);  // [hidden, q_size]: head h is columns 2h, 2h + 1
  Tensor o_shard = shard_weight(spec, second, "layers.1.o", o);
  ASSERT_EQ(o_shard.shape(), (Shape{3, 4}));
  EXPECT_EQ(o_shard.data<float>()[0], 4.0f);
  EXPECT_EQ(o_shard.data<float>()[4 + 3], 1007.0f);
}

// The linear parameter count a memory plan and a 4-bit upload use is what
// shard_weight hands each rank (KV heads replicated past their count).
TEST(engineTpShard, LinearParameterCountIsWhatTheShardsHold) {
  for (const auto& [heads, kv_heads, intermediate] : {std::tuple{4, 2, 6}, std::tuple{8, 2, 12}, std::tuple{6, 2, 6}}) {
    const ModelSpec spec = spec_of(heads, kv_heads, intermediate);
    const int64_t h = spec.hidden_size;
    const Tensor qkv = tagged(spec.qkv_size(), h), o = tagged(h, spec.q_size()),
                 gate_up = tagged(2 * spec.intermediate_size, h), down = tagged(h, spec.intermediate_size);
    EXPECT_EQ(spec.linear_params_per_layer(), qkv.numel() + o.numel() + gate_up.numel() + down.numel());
    for (int tp : valid_tp_sizes(spec)) {
      if (spec.intermediate_size % tp != 0) continue;
      for (int rank = 0; rank < tp; ++rank) {
        const TpShard shard = make_tp_shard(spec, rank, tp);
        int64_t held = 0;
        for (const auto& [name, full] : {std::pair{"layers.0.qkv", qkv}, std::pair{"layers.0.o", o},
                                         std::pair{"layers.0.gate_up", gate_up}, std::pair{"layers.0.down", down}}) {
          held += shard_weight(spec, shard, name, full).numel();
        }
        EXPECT_EQ(shard.linear_params_per_layer(spec), held) << heads << " heads, tp " << tp << " rank " << rank;
      }
    }
  }
}

TEST(engineTpShard, LmHeadRowsArePaddedAndTheRestReplicated) {
  const ModelSpec spec = spec_of(4, 4, 12, /*vocab=*/10);
  const Tensor head = tagged(10, 3);
  TpShard last = make_tp_shard(spec, 3, 4);  // ceil(10 / 4) = 3 rows: 9, then zero padding
  Tensor rows = shard_weight(spec, last, "lm_head", head);
  ASSERT_EQ(rows.shape(), (Shape{3, 3}));
  EXPECT_EQ(row_tags(rows), (std::vector<int64_t>{9, 0, 0}));
  EXPECT_EQ(rows.data<float>()[3 * 1 + 1], 0.0f);
  const Tensor norm = tagged(3, 1).reshape({3});
  EXPECT_EQ(shard_weight(spec, last, "layers.0.attn_norm", norm).raw_data(), norm.raw_data());
  EXPECT_EQ(shard_weight(spec, last, "embed", head).raw_data(), head.raw_data());  // replicated
  EXPECT_EQ(shard_weight(spec, make_tp_shard(spec, 0, 1), "layers.0.qkv", head).raw_data(), head.raw_data());
}

}  // namespace
}  // namespace tessera::model
