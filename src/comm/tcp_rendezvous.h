// The multi-node rendezvous: every rank of every node connects to node 0
// (--master-addr, --master-port), says who it is, and gets back what the
// group agreed on; what remains is one `tcp` communicator per local rank (the
// group's host channel) and, for GPU ranks, NCCL's unique id made on node 0.
//
// Node 0 listens on every interface at the port; its own ranks 1.. connect to
// it over loopback like any other. Each rank's hello carries the group's shape
// (world size, nodes, its node and rank), a fingerprint of what every node
// must agree on (the model, the dtype, the KV block size — the caller decides)
// and its node's offer (the caller's: the KV blocks the node can hold); node
// 0 checks every hello, takes the smallest offer, and answers each rank with
// it, or with the reason it refuses (a second node 0, a rank twice, another
// model). A node that starts before node 0 retries until the timeout.
// Failures are Error(kCommFailure) naming the node and what to change.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/nccl_communicator.h"
#include "comm/tcp_communicator.h"

namespace tessera::comm {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0 on node 0: any free port (tests), see Rendezvous::port
  int nnodes = 1;
  int node_rank = 0;
  int world_size = 1;  // ranks over every node; node n runs [n * world/nnodes, (n+1) * world/nnodes)
  std::string fingerprint;
  int64_t offer = 0;
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};  // for the whole rendezvous
  std::chrono::milliseconds comm_timeout{std::chrono::minutes(5)};  // of the tcp communicators made
  bool share_nccl_id = false;  // node 0 makes an NCCL unique id for the group
};

struct Rendezvous {
  int first_rank = 0;  // global rank of this node's first rank
  std::vector<std::unique_ptr<TcpCommunicator>> links;  // [world/nnodes]: global ranks first_rank + i
  int64_t agreed_offer = 0;  // the smallest offer of any node
  std::optional<NcclUniqueId> nccl_id;
  int port = 0;  // where node 0 listened
};

// Node 0 may pass a listener already open (tests pick a free port that way);
// otherwise it listens on options.master_port.
Rendezvous rendezvous(const RendezvousOptions& options, TcpListener* listener = nullptr);

// Ranks per node; Error(kInvalidArgument) naming the sizes that work when
// `world_size` does not split over `nnodes`, or node_rank is out of range.
int ranks_per_node(int world_size, int nnodes, int node_rank);

}  // namespace tessera::comm
