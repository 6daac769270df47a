// A structured output's constraint for engine tests, scripted: even ids
// only (eos, 2, excepted); the output may end after `end_after` tokens and
// is done after `done_after`.
#pragma once

#include <span>

#include "engine/token_constraint.h"

namespace tessera::engine::testing {

class EvenIds final : public TokenConstraint {
 public:
  EvenIds(int end_after, int done_after) : end_after_(end_after), done_after_(done_after) {}
  void allowed(std::span<uint64_t> allowed) const override {
    if (taken_ >= done_after_) return;
    for (size_t id = 0; id < allowed.size() * 64; id += 2) allowed[id / 64] |= uint64_t{1} << (id % 64);
    allowed[0] &= ~(uint64_t{1} << 2);  // eos is not one of its tokens
  }
  bool can_end() const override { return taken_ >= end_after_; }
  bool done() const override { return taken_ >= done_after_; }
  bool accept(int32_t id) override {
    if (id % 2 != 0 || id == 2) return false;
    ++taken_;
    return true;
  }

 private:
  int end_after_, done_after_, taken_ = 0;
};

}  // namespace tessera::engine::testing
