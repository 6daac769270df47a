// The `nccl` communicator: one rank of an NCCL group, on one CUDA device and
// the stream of the backend that owns the tensors.
//
// Every rank of a process group is made from the same unique id (made once,
// shared in-process; across nodes it travels with the rendezvous,
// comm/tcp_rendezvous.h), each
// on its own thread: make_nccl_communicator(id, rank, world_size, ...). The
// communicator is non-blocking (NCCL's config.blocking = 0): initialisation
// and each collective are polled against the timeout, and a collective is
// waited for on its stream the same way, so a rank that never arrives becomes
// Error(kCommFailure) after the timeout instead of a hang; the communicator is
// then aborted (ncclCommAbort). Waiting for each collective costs a host
// sync per collective; a watchdog thread can lift that once the CUDA path runs
// tensor-parallel. NCCL's own failures are kCommFailure carrying
// NCCL's message. Tensors are device tensors of the communicator's device.
//
// Built only with CUDA and NCCL found; elsewhere nccl_available() is false and
// the functions throw Error(kUnsupported).
#pragma once

#include <array>
#include <chrono>
#include <memory>

#include "comm/communicator.h"
#include "comm/group_abort.h"

namespace tessera::comm {

// ncclUniqueId's 128 bytes, without NCCL's header.
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};

struct NcclCommOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Shared by the ranks of an in-process group: abort() raises it, and a rank
  // polling a collective that sees it raised aborts its own communicator and
  // fails at once instead of after the timeout. Null: this rank alone.
  std::shared_ptr<GroupAbort> group_abort;
};

bool nccl_available();

// A new group's id; every rank of the group is made from the same one.
NcclUniqueId make_nccl_unique_id();

// Rank `rank` of `world_size` on CUDA device `device`; collectives are queued
// on `stream` (a cudaStream_t; null for the default stream). Call on the
// thread that runs the rank, every rank at about the same time.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueId& id, int rank, int world_size, int device,
                                                     void* stream, const NcclCommOptions& options = {});

}  // namespace tessera::comm
