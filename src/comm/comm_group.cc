#include "comm/comm_group.h"

#include <fmt/format.h>

#include <mutex>

#include "comm/group_abort.h"
#include "comm/nccl_communicator.h"
#include "comm/peer_communicator.h"
#include "comm/thread_communicator.h"
#include "core/error.h"

namespace tessera::comm {

namespace {

// CPU ranks: the thread communicators are made up front and handed out.
class ThreadCommGroup final : public CommGroup {
 public:
  ThreadCommGroup(int world, const CommGroupOptions& options)
      : comms_(make_thread_communicators(world, {options.timeout})) {}
  CommKind kind() const override { return CommKind::kThread; }
  int world_size() const override { return static_cast<int>(comms_.size()); }
  std::unique_ptr<Communicator> make_rank(int rank, void*) override {
    std::lock_guard lock(mutex_);
    if (rank < 0 || rank >= world_size() || !comms_[rank]) {
      throw Error(ErrorKind::kInternal, fmt::format("thread group: rank {} made twice or out of range", rank));
    }
    return std::move(comms_[rank]);
  }
  void abort(int rank, const std::string& reason) noexcept override {
    std::lock_guard lock(mutex_);
    // Any communicator still here fails the whole thread group.
    for (auto& comm : comms_) {
      if (comm) {
        comm->abort("rank " + std::to_string(rank) + ": " + reason);
        return;
      }
    }
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// One GPU per rank, NCCL for everything: each rank initialises its NCCL
// communicator from the group's unique id on its own thread. This process
// runs global ranks [first_rank, first_rank + devices.size()) of the group.
class NcclCommGroup final : public CommGroup {
 public:
  NcclCommGroup(std::vector<int> devices, int first_rank, int world, const NcclUniqueId& id,
                const CommGroupOptions& options)
      : devices_(std::move(devices)), first_rank_(first_rank), world_(world), id_(id),
        abort_(std::make_shared<GroupAbort>()) {
    options_.timeout = options.timeout;
    options_.group_abort = abort_;
  }
  CommKind kind() const override { return CommKind::kNccl; }
  int world_size() const override { return world_; }
  std::unique_ptr<Communicator> make_rank(int rank, void* stream) override {
    try {
      const int local = rank - first_rank_;
      if (local < 0 || local >= static_cast<int>(devices_.size())) {
        throw Error(ErrorKind::kInternal, fmt::format("nccl group: rank {} does not run in this process", rank));
      }
      return make_nccl_communicator(id_, rank, world_, devices_[local], stream, options_);
    } catch (const std::exception& e) {
      abort_->raise(rank, e.what());  // peers initialising leave at once
      throw;
    }
  }
  void abort(int rank, const std::string& reason) noexcept override { abort_->raise(rank, reason); }

 private:
  std::vector<int> devices_;
  int first_rank_;
  int world_;
  NcclUniqueId id_;
  std::shared_ptr<GroupAbort> abort_;
  NcclCommOptions options_;
};

}  // namespace

std::shared_ptr<CommGroup> make_comm_group(const CommPlan& plan, int world_size, const CommGroupOptions& options) {
  if (plan.kind != CommKind::kThread && plan.kind != CommKind::kTcp &&
      static_cast<int>(plan.devices.size()) != world_size) {
    throw Error(ErrorKind::kInternal,
                fmt::format("a {} group of {} ranks with {} devices", comm_kind_name(plan.kind), world_size,
                            plan.devices.size()));
  }
  switch (plan.kind) {
    case CommKind::kThread: return std::make_shared<ThreadCommGroup>(world_size, options);
    case CommKind::kTcp:
      throw Error(ErrorKind::kInternal, "a tcp group is made by the multi-node rendezvous (tcp_rendezvous.h)");
    case CommKind::kNccl:
      return std::make_shared<NcclCommGroup>(plan.devices, 0, world_size, make_nccl_unique_id(), options);
    case CommKind::kCustom:
    case CommKind::kSameDevice: return make_peer_comm_group(plan, world_size, options);
  }
  throw Error(ErrorKind::kInternal, "unknown communicator kind");
}

std::shared_ptr<CommGroup> make_nccl_node_group(const std::vector<int>& devices, int first_rank, int world_size,
                                                const NcclUniqueId& id, const CommGroupOptions& options) {
  return std::make_shared<NcclCommGroup>(devices, first_rank, world_size, id, options);
}

}  // namespace tessera::comm
