// Builds without CUDA: no peer-buffer communicators, no peer access to report.
#include <cstdlib>

#include "comm/comm_plan.h"
#include "comm/peer_communicator.h"
#include "core/error.h"

namespace tessera::comm {

std::shared_ptr<CommGroup> make_peer_comm_group(const CommPlan& plan, int, const CommGroupOptions&) {
  throw Error(ErrorKind::kUnsupported,
              std::string("the ") + comm_kind_name(plan.kind) + " communicator needs a build with CUDA",
              "rebuild with the CUDA toolkit installed, or use --device cpu");
}

void enable_peer_access(int, const std::vector<int>&) {
  throw Error(ErrorKind::kUnsupported, "peer access needs a build with CUDA");
}

std::vector<std::vector<bool>> query_peer_access() {
  // A malformed switch is still an error.
  peer_access_as_configured({}, std::getenv("TESSERA_PEER_ACCESS"), std::getenv("NCCL_P2P_DISABLE"));
  return {};
}

}  // namespace tessera::comm
