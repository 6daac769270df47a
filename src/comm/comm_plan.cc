#include "comm/comm_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "comm/tcp_rendezvous.h"
#include "core/error.h"

namespace tessera::comm {

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::kThread: return "thread";
    case CommKind::kTcp: return "tcp";
    case CommKind::kNccl: return "nccl";
    case CommKind::kCustom: return "custom";
    case CommKind::kSameDevice: return "same-device";
  }
  return "?";
}

const char* all_reduce_algorithm_name(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto: return "auto";
    case AllReduceAlgorithm::kOneShot: return "one-shot";
    case AllReduceAlgorithm::kTwoShot: return "two-shot";
  }
  return "?";
}

AllReduceAlgorithm pick_all_reduce(size_t bytes, int world_size, AllReduceAlgorithm forced) {
  if (forced != AllReduceAlgorithm::kAuto) return forced;
  if (world_size <= 2 || bytes < kOneShotMaxBytes) return AllReduceAlgorithm::kOneShot;
  return AllReduceAlgorithm::kTwoShot;
}

bool every_pair_has_peer_access(const std::vector<int>& devices, const std::vector<std::vector<bool>>& peer_access) {
  for (int a : devices) {
    for (int b : devices) {
      if (a == b) continue;
      if (a < 0 || b < 0 || a >= static_cast<int>(peer_access.size()) || b >= static_cast<int>(peer_access[a].size()) ||
          !peer_access[a][b]) {
        return false;
      }
    }
  }
  return true;
}

namespace {

// Several nodes: this node's ranks, CPU threads or one GPU each, and NCCL
// between GPUs (the custom all-reduce needs peer access, which ends at the node).
CommPlan choose_node_comm(const CommRequest& request) {
  const int local = ranks_per_node(request.world_size, request.nnodes, 0);
  CommPlan plan;
  if (!request.on_gpu) {
    plan.kind = CommKind::kTcp;
    plan.reason = fmt::format("{} CPU rank(s) on each of {} nodes, every collective over TCP through rank 0", local,
                              request.nnodes);
    return plan;
  }
  if (request.same_device) {
    throw Error(ErrorKind::kInvalidArgument, "TESSERA_TP_SAME_DEVICE does not apply across nodes",
                "unset TESSERA_TP_SAME_DEVICE, or run one node (--nnodes 1)");
  }
  if (!request.nccl_available) {
    throw Error(ErrorKind::kUnsupported, "tensor parallelism across nodes needs NCCL, and this build has none",
                "build with NCCL installed");
  }
  const int available = request.visible_gpus - request.first_device;
  if (local > available) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--tp {} over {} nodes runs {} ranks on each node, but {} GPU(s) are visible from cuda:{}",
                            request.world_size, request.nnodes, local, std::max(available, 0), request.first_device),
                "use --tp (GPUs per node x --nnodes), or make more GPUs visible (CUDA_VISIBLE_DEVICES)");
  }
  plan.kind = CommKind::kNccl;
  for (int r = 0; r < local; ++r) plan.devices.push_back(request.first_device + r);
  plan.reason = fmt::format("{} GPU rank(s) on each of {} nodes: NCCL for every collective (the custom all-reduce "
                            "needs peer access, which ends at the node)",
                            local, request.nnodes);
  return plan;
}

}  // namespace

CommPlan choose_comm(const CommRequest& request) {
  const int world = request.world_size;
  if (world < 1) throw Error(ErrorKind::kInvalidArgument, fmt::format("--tp {}: needs at least one rank", world));
  if (request.nnodes > 1) return choose_node_comm(request);
  CommPlan plan;
  if (!request.on_gpu) {
    plan.kind = CommKind::kThread;
    plan.reason = fmt::format("{} CPU rank(s) as threads of this process", world);
    return plan;
  }
  if (request.visible_gpus < 1) {
    throw Error(ErrorKind::kInvalidArgument, "tensor parallelism on the GPU: no CUDA device is visible",
                "run `tessera check_env`, or use --device cpu");
  }
  if (request.first_device < 0 || request.first_device >= request.visible_gpus) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cuda:{} does not exist: {} CUDA device(s) visible", request.first_device,
                            request.visible_gpus),
                fmt::format("use cuda:0 .. cuda:{}", request.visible_gpus - 1));
  }
  if (request.same_device) {
    plan.kind = CommKind::kSameDevice;
    plan.devices.assign(world, request.first_device);
    plan.reason = fmt::format("{} ranks on cuda:{} (TESSERA_TP_SAME_DEVICE): collectives over shared device buffers{}",
                              world, request.first_device,
                              request.disable_custom_all_reduce ? " (--disable-custom-all-reduce does not apply: "
                                                                  "NCCL cannot run two ranks on one device)"
                                                                : "");
    return plan;
  }
  const int available = request.visible_gpus - request.first_device;
  if (world > available) {
    std::vector<std::string> fits;
    for (int tp = 1; tp <= available; tp *= 2) fits.push_back(std::to_string(tp));
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--tp {} needs {} GPUs from cuda:{}, but {} are visible there", world, world,
                            request.first_device, available),
                fmt::format("use --tp {} (one rank per GPU), make more GPUs visible (CUDA_VISIBLE_DEVICES), or "
                            "set TESSERA_TP_SAME_DEVICE=1 to test several ranks on one GPU",
                            fmt::join(fits, " or ")));
  }
  for (int r = 0; r < world; ++r) plan.devices.push_back(request.first_device + r);
  if (world == 1) {
    plan.kind = request.nccl_available ? CommKind::kNccl : CommKind::kSameDevice;
    plan.reason = "one rank: no collective moves data";
    return plan;
  }
  const bool peers = every_pair_has_peer_access(plan.devices, request.peer_access);
  if (peers && !request.disable_custom_all_reduce) {
    plan.kind = CommKind::kCustom;
    plan.reason = request.nccl_available
                      ? fmt::format("every pair of the {} GPUs has peer access: custom all-reduce up to {} MiB "
                                    "(one-shot below {} KiB), NCCL for the rest",
                                    world, kCustomMaxBytes >> 20, kOneShotMaxBytes >> 10)
                      : fmt::format("every pair of the {} GPUs has peer access and this build has no NCCL: every "
                                    "collective over peer-mapped buffers",
                                    world);
    return plan;
  }
  if (!request.nccl_available) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("--tp {} across GPUs needs NCCL{}, and this build has none", world,
                            peers ? " (--disable-custom-all-reduce)" : " (not every pair of GPUs has peer access)"),
                "build with NCCL installed, or run with --tp 1");
  }
  plan.kind = CommKind::kNccl;
  plan.reason = request.disable_custom_all_reduce ? "NCCL for every collective (--disable-custom-all-reduce)"
                                                  : "NCCL for every collective (not every pair of GPUs has peer access)";
  return plan;
}

namespace {

// An on/off environment switch: 1, true, yes, on / 0, false, no, off (any
// case); "" is `empty`; anything else names the variable and the fix.
bool parse_switch(const char* name, const std::string& value, bool empty, const char* hint) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v.empty()) return empty;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  throw Error(ErrorKind::kInvalidArgument, fmt::format("{}={}: expected 1 or 0", name, value), hint);
}

}  // namespace

bool parse_same_device(const std::string& value) {
  return parse_switch("TESSERA_TP_SAME_DEVICE", value, false,
                      "set TESSERA_TP_SAME_DEVICE=1 to run every tensor-parallel rank on one GPU, or unset it");
}

std::vector<std::vector<bool>> peer_access_as_configured(std::vector<std::vector<bool>> matrix,
                                                         const char* switch_value, const char* nccl_p2p_disable) {
  bool peers = true;
  if (switch_value != nullptr && *switch_value != '\0') {
    peers = parse_switch("TESSERA_PEER_ACCESS", switch_value, true,
                         "set TESSERA_PEER_ACCESS=0 to treat the GPUs as having no peer access, or unset it");
  } else if (nccl_p2p_disable != nullptr) {
    // NCCL reads it as an integer: anything but 0 disables.
    const std::string v = nccl_p2p_disable;
    peers = v.empty() || v == "0";
  }
  if (peers) return matrix;
  for (size_t a = 0; a < matrix.size(); ++a) {
    for (size_t b = 0; b < matrix[a].size(); ++b) matrix[a][b] = a == b;
  }
  return matrix;
}

int ranks_on_device_of(const CommPlan& plan, int rank) {
  if (rank < 0 || rank >= static_cast<int>(plan.devices.size())) return 1;
  return static_cast<int>(std::count(plan.devices.begin(), plan.devices.end(), plan.devices[rank]));
}

bool same_device_from_env() {
  const char* value = std::getenv("TESSERA_TP_SAME_DEVICE");
  return value && parse_same_device(value);
}

}  // namespace tessera::comm
