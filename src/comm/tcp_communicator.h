// The `tcp` communicator: ranks in different processes (or nodes), host
// tensors, one TCP connection from every rank to rank 0.
//
// What it is for: the ranks of a multi-node group need a host channel — to
// receive each step's plan from node 0, and, for CPU ranks, for every
// collective (NCCL needs GPUs). No well-kept library in Debian gives CPU
// collectives across processes without a launcher of its own (MPI wants
// mpirun; Gloo is not packaged), and the traffic is small, so this is a
// star: every collective, each rank sends its part to rank 0, rank 0
// combines them and replies to each. An all-reduce sums each element over
// ranks 0, 1, ..., n-1 in that order, in f32 (i32 in i64), rounded once — the
// `thread` communicator's arithmetic, so a group split across processes gets
// the same bits as the same group in one process.
//
// Every wait has the timeout (except broadcast_unbounded's wait for the
// root, which is how a worker node idles until node 0's next step); a peer
// that closes, resets, aborts or sends a collective that does not match fails
// the group with Error(kCommFailure) naming the rank, and rank 0 tells every
// other rank why. A failed communicator stays failed.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/tcp_socket.h"

namespace tessera::comm {

class TcpCommunicator : public Communicator {
 public:
  // Like broadcast, but a non-root rank waits without a deadline for the
  // root to send (still failing at once when the connection ends or a peer
  // aborts): a worker node's ranks wait here for node 0's next step.
  virtual void broadcast_unbounded(Tensor& data, int root) = 0;
};

// Rank `rank` of `world_size`. Rank 0 gives one socket per rank (index r
// connected to rank r; index 0 is unused and may be closed); every other
// rank gives one socket, connected to rank 0.
std::unique_ptr<TcpCommunicator> make_tcp_communicator(int rank, int world_size, std::vector<TcpSocket> sockets,
                                                       std::chrono::milliseconds timeout);

}  // namespace tessera::comm
