// TpExecutor: a StepPlan through tensor-parallel ranks in this process.
//
// Threads and ownership: one worker thread per rank, each owning its backend
// (on the CPU, or CUDA device comm_plan.devices[r] with its own stream), its
// communicator (made on that thread from the group of config.comm_plan, its
// collectives ordered on the backend's stream), its weight shard
// (model::make_transformer) and its part of the paged cache (its KV heads).
// Everything a rank owns is made and destroyed on its thread, so a CUDA rank's
// device stays current there. execute and forward are called from one
// thread (the engine thread); they build the ForwardBatch once, hand the same
// const batch to every worker, and wait for all of them. The LM head's
// all-gather puts every row's full logits on each rank's device; rank 0
// samples them there (a plan's device_sampling, where its model
// samples_on_device) or returns them to the host, and the other ranks keep
// nothing (Transformer::forward_as_peer).
//
// Several nodes (config.nodes, from comm::rendezvous): this process runs
// global ranks first_rank .. first_rank + links - 1 of tp. Node 0's executor
// is the engine's: each forward first sends the step (engine/step_message.h)
// over the ranks' host links, then every rank runs it. A worker node's
// executor only follows: follow() runs each step node 0 sends until node 0
// says stop (its executor's destruction) or the group fails. CPU ranks use
// their host link for every collective; GPU ranks an NCCL group over the
// nodes (node 0's unique id came with the rendezvous).
//
// Failures: an exception on any rank aborts the group, so peers blocked in a
// collective fail at once instead of waiting; a rank that stalls makes its
// peers fail after the communicator's timeout. The step then throws the first
// rank's own error (one that is not just a consequence of the abort), its kind
// kept and the rank named, and the communicators are built again so the next
// step runs normally. Nothing hangs on a missing rank, nothing aborts the
// process. Across nodes the group cannot be built again: a failed step
// breaks the executor (every later step is kDeviceFailure naming the cause).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "comm/comm_group.h"
#include "comm/comm_plan.h"
#include "comm/communicator.h"
#include "comm/tcp_rendezvous.h"
#include "engine/executor.h"
#include "model/transformer.h"

namespace tessera::engine {

struct TpExecutorConfig {
  int tp = 1;                  // ranks (--tp); must split the model (model::valid_tp_sizes)
  int64_t num_blocks = 0;      // KV blocks of the paged cache (each rank holds its heads of all of them)
  int64_t block_size = 64;     // tokens per block
  backend::KvCacheFormat kv_cache_format = backend::KvCacheFormat::kCompute;  // --quant-policy 8 / 4: int8 / int4
  std::chrono::milliseconds comm_timeout{std::chrono::minutes(5)};  // a rank waiting longer fails the step
  // Where the ranks run and how they talk (comm::choose_comm). Default: CPU
  // ranks and the thread communicator.
  comm::CommPlan comm_plan;
  DType compute_dtype = DType::kF32;  // of the default CUDA backends
  // What each rank's device must keep free once the rank's weights are in:
  // the memory plan's KV cache, workspace and decode graphs of the ranks on
  // that device (Backend::keep_free_after_weights, which also keeps free the
  // shares of the other ranks loading onto it). 0: nothing promised.
  size_t memory_after_weights = 0;
  comm::AllReduceAlgorithm all_reduce_algorithm = comm::AllReduceAlgorithm::kAuto;  // tests force one
  // Makes this process's r-th rank's backend, on that rank's thread. Default:
  // the CPU backend for a thread plan, else the CUDA backend on
  // comm_plan.devices[r].
  std::function<std::unique_ptr<backend::Backend>(int rank)> make_backend;
  // Several nodes: what the rendezvous left (its links are moved into the
  // ranks; tp is the whole group's size, comm_plan's devices this node's).
  // Null: every rank in this process.
  std::shared_ptr<comm::Rendezvous> nodes;
};

class TpExecutor : public Executor {
 public:
  // Starts the ranks and makes each one's shard from `model` (only read here;
  // the caller may drop it afterwards). Throws Error(kInvalidArgument) listing
  // the sizes that work when config.tp does not split the model, or the first
  // rank's error when a rank cannot load.
  TpExecutor(const model::HostModel& model, const TpExecutorConfig& config);
  ~TpExecutor() override;
  TpExecutor(const TpExecutor&) = delete;
  TpExecutor& operator=(const TpExecutor&) = delete;

  StepOutput execute(const StepPlan& plan) override;
  int64_t vocab_size() const override { return spec_.vocab_size; }
  // Rank 0 samples on its device (device_sampling_wanted of its model).
  bool samples_on_device() const override { return device_sampling_; }

  // One forward of `batch` on every rank; rank 0's logits, host f32
  // [batch.logit_rows.size(), vocab].
  Tensor forward(const model::ForwardBatch& batch);

  // A worker node: runs node 0's steps until node 0 says stop (returns) or
  // the group fails (throws the first rank's error).
  void follow();

  int tp() const { return config_.tp; }
  int local_ranks() const { return static_cast<int>(ranks_.size()); }
  // The communicator backend of the ranks ("thread", "nccl", "custom+nccl", "same-device", ...).
  std::string communicator_name() const;
  const model::ModelSpec& spec() const { return spec_; }

  // Runs on each rank's thread, with its global rank, at the start of each
  // forward (tests make a rank fail or stall with it). Set it between steps only.
  void set_rank_hook(std::function<void(int rank)> hook) { hook_ = std::move(hook); }

 private:
  struct Rank {
    int index = 0;   // in this process
    int global = 0;  // in the group
    std::unique_ptr<backend::Backend> backend;
    std::unique_ptr<comm::Communicator> comm;  // destroyed before the backend whose stream it uses
    // Several nodes: the host channel to rank 0 (steps; every collective of CPU ranks, when comm is null).
    std::unique_ptr<comm::TcpCommunicator> link;
    comm::Communicator* collectives() const { return comm ? comm.get() : link.get(); }
    std::unique_ptr<model::Transformer> model;
    backend::PagedKvCache cache;
    std::exception_ptr error;
    std::thread thread;
    // Releases what the rank owns, in dependency order, on the rank's thread.
    void release() noexcept;
  };

  // One forward of `batch` on every rank: global rank 0 runs `root` with its
  // model (a forward that returns logits or tokens), every other rank
  // forward_as_peer. A null `root`: rank 0 too keeps nothing.
  void run_forward(const model::ForwardBatch& batch, const std::function<void(Rank&)>& root);
  void work(Rank& rank);
  // Runs `job` on every rank and waits; each rank's exception is in rank.error.
  void run_job(const std::function<void(Rank&)>& job);
  // Runs `job` on every rank and waits; on any failure rebuilds the group and
  // throws the root error.
  void run_on_all(const std::function<void(Rank&)>& job, bool rebuild_on_failure = true);
  void rebuild_group();
  void stop() noexcept;
  bool multi_node() const { return config_.nodes != nullptr; }

  model::ModelSpec spec_;
  TpExecutorConfig config_;
  std::shared_ptr<comm::CommGroup> group_;  // the group the ranks' communicators were made from
  std::vector<std::unique_ptr<Rank>> ranks_;
  bool device_sampling_ = false;
  bool broken_ = false;  // a failed group could not be built again: every step fails
  std::string broken_reason_;
  std::function<void(int)> hook_;

  std::mutex mutex_;  // guards job_, job_id_, pending_, stopping_
  std::condition_variable job_ready_;
  std::condition_variable job_done_;
  const std::function<void(Rank&)>* job_ = nullptr;
  uint64_t job_id_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
};

}  // namespace tessera::engine
