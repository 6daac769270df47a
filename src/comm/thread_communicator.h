// The `thread` communicator: the ranks of a group are threads of one process
// sharing a ThreadGroup, and the collectives run on host memory.
//
// Each collective is a rendezvous: every rank posts its tensor, waits for the
// others, works on the posted tensors and waits again before anyone may reuse
// them. An all-reduce is split into world_size contiguous element ranges
// (uneven when the count does not divide); rank r sums range r over ranks 0, 1,
// ..., n-1 in that order into a shared buffer, and every rank copies the whole
// result back, so all ranks hold the same bits. A rank that waits longer than
// the timeout fails the group with Error(kCommFailure) naming the ranks that
// did not arrive, instead of hanging.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace tessera::comm {

struct ThreadCommOptions {
  // How long a rank waits for the others at one rendezvous. Long by default:
  // ranks of a CPU forward wait for each other's whole layer compute.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

class ThreadGroup;

// One communicator per rank of a new group of `world_size` ranks; hand
// communicator r to the thread that runs rank r. Throws
// Error(kInvalidArgument) when world_size < 1.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int world_size,
                                                                     const ThreadCommOptions& options = {});

}  // namespace tessera::comm
