// rope_depends_on_length: the Transformer makes the frequencies of lengths
// where it is false once (from length 1), so at those lengths every scaling
// must give exactly length 1's frequencies, and where it is true (dynamic NTK
// past the trained context) they must differ.
#include <gtest/gtest.h>

#include "model/layers/rope.h"

namespace tessera::model {
namespace {

ModelSpec spec_with(RopeScalingType type) {
  ModelSpec spec;
  spec.head_dim = 16;
  spec.rope_theta = 10000.0;
  spec.max_position_embeddings = 64;
  spec.rope_scaling.type = type;
  spec.rope_scaling.factor = 4.0;
  spec.rope_scaling.original_max_position_embeddings = 16;
  return spec;
}

bool same(const RopeFrequencies& a, const RopeFrequencies& b) {
  return a.inv_freq == b.inv_freq && a.attention_scaling == b.attention_scaling;
}

TEST(RopeFrequencies, LengthsThatDoNotMatterGiveLengthOnesFrequencies) {
  for (RopeScalingType type : {RopeScalingType::kNone, RopeScalingType::kLinear, RopeScalingType::kLlama3,
                               RopeScalingType::kYarn, RopeScalingType::kDynamic}) {
    const ModelSpec spec = spec_with(type);
    const RopeFrequencies first = rope_frequencies(spec, 1);
    for (int64_t length : {2, 17, 63, 64, 65, 1000}) {
      const bool depends = rope_depends_on_length(spec, length);
      EXPECT_EQ(depends, type == RopeScalingType::kDynamic && length > 64) << static_cast<int>(type) << " " << length;
      EXPECT_EQ(same(rope_frequencies(spec, length), first), !depends) << static_cast<int>(type) << " " << length;
    }
  }
}

}  // namespace
}  // namespace tessera::model
