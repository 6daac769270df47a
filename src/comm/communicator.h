// Communicator: the collectives tensor parallelism needs, for one rank of a
// group, and nothing else (no fused kernels: comm knows no model).
//
// Every rank of the group calls the same collectives in the same order with
// tensors of the same dtype and element count; a mismatch is an error on every
// rank. Tensors are contiguous. Ordering: a collective is ordered after the
// work already issued on the device of its tensors and before the work issued
// after it — on the host (the `thread` backend) that means it has finished when
// the call returns; a device backend enqueues it on the stream of the backend
// that owns the tensors and returns, and later ops of that stream see the
// result.
//
// Failures are Error(kCommFailure): a rank that does not arrive within the
// timeout, a peer that called abort(), a backend's own error (with its
// message). A communicator that failed stays failed; the caller builds a new
// group (the tensor-parallel executor does, after the failed step).
#pragma once

#include <string>

#include "core/tensor.h"

namespace tessera::comm {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend_name() const = 0;  // "thread", "nccl"

  // In place: `data` becomes the element-wise sum of every rank's `data`.
  // f32, f16 and bf16 sum in f32 (rounded once at the end), i32 in i64. The sum
  // runs over ranks in a fixed order, so every rank gets the same bits, run
  // after run.
  virtual void all_reduce_sum(Tensor& data) = 0;

  // `output` [world_size * input.numel()] (any shape of that many elements)
  // receives rank r's `input` at elements [r * n, (r + 1) * n). Every rank
  // gives the same element count (pad uneven parts, as NCCL requires).
  virtual void all_gather(const Tensor& input, Tensor& output) = 0;

  // `data` on every rank becomes the root's `data`.
  virtual void broadcast(Tensor& data, int root) = 0;

  // Returns when every rank has called it.
  virtual void barrier() = 0;

  // Fails the group: peers waiting in a collective, or entering one later,
  // throw Error(kCommFailure) naming this rank and `reason`. Never throws.
  virtual void abort(const std::string& reason) noexcept = 0;
};

}  // namespace tessera::comm
