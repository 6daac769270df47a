// TokenConstraint: what one output may be, token by token (structured
// output: a JSON Schema's documents). The engine sees token ids only; the
// server makes each request's constraint (a grammar over the tokenizer's
// bytes) and the engine asks it, before each sample, which ids may come next.
//
// A constrained request samples on the host (its logits row is copied back);
// the ids not allowed become -inf before any sampling parameter applies, an
// end id (eos or a stop id) is allowed only where the output may end, and the
// output ends with finish reason "stop" as soon as the constraint is done.
#pragma once

#include <cstdint>
#include <span>

namespace tessera::engine {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets bit id (word id / 64, bit id % 64) of `allowed` for each id that may
  // come next; `allowed` is zeroed by the caller and has a bit for every id
  // of the vocabulary. Called from the sampling threads, one request each.
  virtual void allowed(std::span<uint64_t> allowed) const = 0;
  // The output so far is whole: an end id may come next.
  virtual bool can_end() const = 0;
  // The output is whole and nothing may follow: it ends now.
  virtual bool done() const = 0;
  // Takes the sampled id (never an end id). False when `id` was not allowed.
  virtual bool accept(int32_t id) = 0;
};

}  // namespace tessera::engine
