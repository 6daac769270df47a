// Which communicator a tensor-parallel group uses, decided once at start-up
// from plain facts (where the ranks run, how many GPUs are visible, which
// pairs have peer access, the switches), so the decision is testable without
// a GPU and can be printed by `tessera check_env`.
//
//   thread       CPU ranks: threads of this process sharing host memory.
//   tcp          CPU ranks over several nodes (--nnodes): every collective
//                over each rank's TCP link to rank 0 (tcp_communicator.h).
//   nccl         one GPU per rank, NCCL for every collective.
//   custom       one GPU per rank, every pair with peer access: all-reduces
//                up to kCustomMaxBytes by the one-shot / two-shot kernels
//                over peer-mapped buffers (custom_all_reduce.h), NCCL for
//                larger ones and for all-gather, broadcast and barrier.
//   same-device  every rank on one GPU (a test mode: NCCL refuses two ranks
//                on one device): every collective over device buffers shared
//                by the ranks, by the same kernels.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tessera::comm {

enum class CommKind { kThread, kTcp, kNccl, kCustom, kSameDevice };

const char* comm_kind_name(CommKind kind);  // "thread", "tcp", "nccl", "custom", "same-device"

// Messages up to this size take the custom all-reduce; larger ones NCCL.
inline constexpr size_t kCustomMaxBytes = size_t{8} << 20;
// Below this size one-shot (each rank reads every peer's whole buffer),
// from it two-shot (reduce-scatter then all-gather: each rank reads 1/n).
inline constexpr size_t kOneShotMaxBytes = size_t{512} << 10;

enum class AllReduceAlgorithm { kAuto, kOneShot, kTwoShot };
const char* all_reduce_algorithm_name(AllReduceAlgorithm algorithm);  // "auto", "one-shot", "two-shot"

// The algorithm for a message of `bytes` (kAuto picks by size); two ranks
// always take one-shot, where two-shot moves the same bytes in two steps.
AllReduceAlgorithm pick_all_reduce(size_t bytes, int world_size, AllReduceAlgorithm forced = AllReduceAlgorithm::kAuto);

struct CommRequest {
  int world_size = 1;  // ranks of the group, over every node
  int nnodes = 1;      // > 1: this node runs world_size / nnodes of them (--nnodes)
  bool on_gpu = false;
  int visible_gpus = 0;
  bool same_device = false;               // TESSERA_TP_SAME_DEVICE=1: every rank on `first_device`
  bool disable_custom_all_reduce = false;  // --disable-custom-all-reduce
  bool nccl_available = false;            // this build has NCCL
  int first_device = 0;                   // --device cuda:N: ranks use N, N+1, ...
  // peer_access[i][j]: device i can map device j's memory (cudaDeviceCanAccessPeer),
  // indexed by CUDA ordinal over every visible device; may be empty when unknown.
  std::vector<std::vector<bool>> peer_access;
};

struct CommPlan {
  CommKind kind = CommKind::kThread;
  // This node's r-th rank runs on CUDA device devices[r]; empty for CPU ranks.
  // Across nodes, CPU ranks talk over their tcp links (comm/tcp_rendezvous.h)
  // and GPU ranks through NCCL.
  std::vector<int> devices;
  std::string reason;        // one line for the start-up log and check_env
};

// Throws Error(kInvalidArgument) when there are fewer GPUs than ranks (naming
// the same-device switch for tests and --tp values that fit; across nodes, the
// ranks of one node count), or the ranks do not split over the nodes, and
// Error(kUnsupported) when neither NCCL nor peer access can connect the GPUs
// (across nodes: without NCCL).
CommPlan choose_comm(const CommRequest& request);

// How many of this node's ranks run on rank r's device (r included): more
// than one where ranks share a GPU (same-device), whose memory they then
// share; 1 for CPU ranks.
int ranks_on_device_of(const CommPlan& plan, int rank);

// TESSERA_TP_SAME_DEVICE: "1", "true", "yes", "on" → true; unset, "0", "false",
// "no", "off", "" → false; anything else is Error(kInvalidArgument).
bool same_device_from_env();
bool parse_same_device(const std::string& value);

// Every pair of distinct devices among `devices` has peer access both ways.
bool every_pair_has_peer_access(const std::vector<int>& devices, const std::vector<std::vector<bool>>& peer_access);

// The peer-access matrix of every visible CUDA device (cudaDeviceCanAccessPeer),
// as peer_access_as_configured leaves it under TESSERA_PEER_ACCESS; empty in a
// build without CUDA or on a machine without GPUs.
std::vector<std::vector<bool>> query_peer_access();

// TESSERA_PEER_ACCESS (`switch_value`, may be null): "0", "false", "no" or
// "off" keep only each device's access to itself, what GPUs without peer
// access report (the RTX 4090 report's topology), so the automatic choice of
// NCCL can be run on GPUs that have it; "1" leaves the matrix as it is;
// anything else is Error(kInvalidArgument). Unset (or ""), NCCL_P2P_DISABLE
// (`nccl_p2p_disable`, may be null) decides the same way: a machine told to
// keep NCCL off peer access (the usual remedy where the driver reports peer
// access that does not work) keeps the custom all-reduce off it too.
std::vector<std::vector<bool>> peer_access_as_configured(std::vector<std::vector<bool>> matrix,
                                                         const char* switch_value,
                                                         const char* nccl_p2p_disable = nullptr);

}  // namespace tessera::comm
