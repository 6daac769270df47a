// CommGroup: what one tensor-parallel group shares while its ranks make their
// communicators — the NCCL unique id, the peer-buffer table of the custom
// all-reduce, the group's abort flag.
//
// Made once on any thread by make_comm_group(plan); then every rank, on its
// own thread and at about the same time (NCCL's initialisation and the
// exchange of peer buffers wait for all of them), calls make_rank with its
// device's stream. A group makes each rank once; a failed group is replaced by
// a new one (the tensor-parallel executor does that after a failed step).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/comm_plan.h"
#include "comm/communicator.h"
#include "comm/nccl_communicator.h"

namespace tessera::comm {

struct CommGroupOptions {
  // A rank that waits longer than this at one collective (or at the group's
  // start) fails the group with Error(kCommFailure).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Forces one custom all-reduce algorithm (benchmarks and tests); kAuto picks by size.
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto;
};

class CommGroup {
 public:
  virtual ~CommGroup() = default;
  virtual CommKind kind() const = 0;
  virtual int world_size() const = 0;
  // Rank `rank`'s communicator (a global rank), on its CUDA device and the
  // cudaStream_t `stream` (null for CPU ranks). Call on the rank's thread.
  virtual std::unique_ptr<Communicator> make_rank(int rank, void* stream) = 0;
  // Fails the group for a rank that cannot make (or no longer has) its
  // communicator, so peers waiting for it leave at once. Never throws.
  virtual void abort(int rank, const std::string& reason) noexcept = 0;
};

// Throws Error(kUnsupported) when the plan's kind is not in this build.
std::shared_ptr<CommGroup> make_comm_group(const CommPlan& plan, int world_size, const CommGroupOptions& options = {});

// This node's part of an NCCL group that spans nodes: global ranks
// first_rank .. first_rank + devices.size() - 1 of world_size, rank
// first_rank + i on CUDA device devices[i], all from node 0's unique id
// (comm/tcp_rendezvous.h carries it). make_rank takes global ranks.
std::shared_ptr<CommGroup> make_nccl_node_group(const std::vector<int>& devices, int first_rank, int world_size,
                                                const NcclUniqueId& id, const CommGroupOptions& options = {});

}  // namespace tessera::comm
