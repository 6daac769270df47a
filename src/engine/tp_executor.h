// TpExecutor: a StepPlan through tensor-parallel ranks in this process.
//
// Threads and ownership: one worker thread per rank, each owning its backend,
// its communicator, its weight shard (model::make_transformer) and its part of
// the paged cache (its KV heads). execute and forward are called from one
// thread (the engine thread); they build the ForwardBatch once, hand the same
// const batch to every worker, and wait for all of them. Each rank ends with
// the full logits (the LM head's all-gather); rank 0's are returned for
// sampling.
//
// Failures: an exception on any rank aborts the group, so peers blocked in a
// collective fail at once instead of waiting; a rank that stalls makes its
// peers fail after the communicator's timeout. The step then throws the first
// rank's own error (one that is not just a consequence of the abort), its kind
// kept and the rank named, and the communicators are built again so the next
// step runs normally. Nothing hangs on a missing rank, nothing aborts the
// process.
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
#include "comm/communicator.h"
#include "engine/executor.h"
#include "model/transformer.h"

namespace tessera::engine {

struct TpExecutorConfig {
  int tp = 1;                  // ranks (--tp); must split the model (model::valid_tp_sizes)
  int64_t num_blocks = 0;      // KV blocks of the paged cache (each rank holds its heads of all of them)
  int64_t block_size = 64;     // tokens per block
  std::chrono::milliseconds comm_timeout{std::chrono::minutes(5)};  // a rank waiting longer fails the step
  // Makes rank r's backend, on that rank's thread. Default: the CPU backend.
  std::function<std::unique_ptr<backend::Backend>(int rank)> make_backend;
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

  // One forward of `batch` on every rank; rank 0's logits, host f32
  // [batch.logit_rows.size(), vocab].
  Tensor forward(const model::ForwardBatch& batch);

  int tp() const { return static_cast<int>(ranks_.size()); }
  const model::ModelSpec& spec() const { return spec_; }

  // Runs on each rank's thread at the start of each forward (tests make a rank
  // fail or stall with it). Set it between steps only.
  void set_rank_hook(std::function<void(int rank)> hook) { hook_ = std::move(hook); }

 private:
  struct Rank {
    int index = 0;
    std::unique_ptr<backend::Backend> backend;
    std::unique_ptr<model::Transformer> model;
    backend::PagedKvCache cache;
    Tensor logits;
    std::exception_ptr error;
    std::thread thread;
  };

  void work(Rank& rank);
  // Runs `job` on every rank and waits; on any failure rebuilds the group and
  // throws the root error.
  void run_on_all(const std::function<void(Rank&)>& job);
  void rebuild_group();
  void stop() noexcept;

  model::ModelSpec spec_;
  TpExecutorConfig config_;
  std::vector<std::unique_ptr<comm::Communicator>> comms_;  // comms_[r] belongs to rank r
  std::vector<std::unique_ptr<Rank>> ranks_;
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
