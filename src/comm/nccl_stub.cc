// Builds without NCCL: the nccl communicator is reported as unavailable.
#include "comm/nccl_communicator.h"
#include "core/error.h"

namespace tessera::comm {

namespace {
[[noreturn]] void unavailable() {
  throw Error(ErrorKind::kUnsupported, "this build of tessera has no NCCL communicator",
              "build with CUDA and NCCL installed, or run with --tp 1");
}
}  // namespace

bool nccl_available() { return false; }
NcclUniqueId make_nccl_unique_id() { unavailable(); }
std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueId&, int, int, int, void*,
                                                     const NcclCommOptions&) {
  unavailable();
}

}  // namespace tessera::comm
