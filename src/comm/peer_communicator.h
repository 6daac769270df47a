// The `custom` and `same-device` communicators: ranks of one process whose
// devices can read each other's memory — GPUs where every pair has peer
// access, or several ranks on one GPU — connected by the kernels of
// custom_all_reduce.h over buffers each rank allocates once (two of
// kCustomMaxBytes and a Signal) and registers with the group.
//
//   custom       all-reduces up to kCustomMaxBytes by one-shot or two-shot,
//                larger ones and every other collective by NCCL (when this
//                build has it; else by the same kernels in chunks). Nothing
//                waits on the host: the kernels stay on the stream.
//   same-device  every collective by the kernels, in chunks of the buffers;
//                the host waits for each collective (so ranks sharing a GPU
//                never queue behind each other's spinning barrier).
//
// Failures: a rank's abort raises the group's flag, which the kernels read
// from host-mapped memory and leave their barriers; a barrier that waits past
// the timeout leaves too. Either way the kernel writes a status word and the
// next collective (or, for same-device, this one) throws Error(kCommFailure).
// The buffers belong to the group and are freed with it, after every rank
// has waited for its own stream, so no kernel writes into freed memory.
#pragma once

#include <memory>

#include "comm/comm_group.h"

namespace tessera::comm {

// A group of kind kCustom or kSameDevice (plan.devices names each rank's GPU).
// Throws Error(kUnsupported) in a build without CUDA.
std::shared_ptr<CommGroup> make_peer_comm_group(const CommPlan& plan, int world_size, const CommGroupOptions& options);

// Makes every pair of `devices` able to access each other (cudaDeviceEnablePeerAccess
// from the calling thread's device); throws Error(kCommFailure) naming a pair that cannot.
void enable_peer_access(int device, const std::vector<int>& devices);

}  // namespace tessera::comm
