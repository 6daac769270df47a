#include "engine/tp_executor.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/cpu_executor.h"
#include "model/shard.h"

namespace tessera::engine {

namespace {

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown exception";
  }
}

bool is_comm_failure(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.kind() == ErrorKind::kCommFailure;
  } catch (...) {
    return false;
  }
}

}  // namespace

TpExecutor::TpExecutor(const model::HostModel& model, const TpExecutorConfig& config)
    : spec_(model.spec), config_(config) {
  model::check_tp_size(spec_, config_.tp);
  const comm::CommPlan& plan = config_.comm_plan;
  if (plan.kind != comm::CommKind::kThread && static_cast<int>(plan.devices.size()) != config_.tp) {
    throw Error(ErrorKind::kInternal, fmt::format("a {} plan with {} devices for {} ranks",
                                                  comm::comm_kind_name(plan.kind), plan.devices.size(), config_.tp));
  }
  if (!config_.make_backend) {
    if (plan.kind == comm::CommKind::kThread) {
      config_.make_backend = [](int) { return backend::make_cpu_backend(); };
    } else {
      config_.make_backend = [devices = plan.devices, dtype = config_.compute_dtype](int rank) {
        return backend::make_cuda_backend(devices[rank], dtype);
      };
    }
  }
  group_ = comm::make_comm_group(plan, config_.tp, {config_.comm_timeout, config_.all_reduce_algorithm});
  for (int r = 0; r < config_.tp; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->index = r;
    ranks_.push_back(std::move(rank));
  }
  for (auto& rank : ranks_) rank->thread = std::thread([this, r = rank.get()] { work(*r); });
  try {
    run_on_all([&](Rank& rank) {
      rank.backend = config_.make_backend(rank.index);
      rank.comm = group_->make_rank(rank.index, rank.backend->stream_handle());
      rank.model = model::make_transformer(model, *rank.backend, rank.comm.get());
      rank.cache = rank.model->allocate_cache(config_.num_blocks, config_.block_size);
    }, /*rebuild_on_failure=*/false);
  } catch (...) {
    stop();
    throw;
  }
}

std::string TpExecutor::communicator_name() const {
  return ranks_.empty() || !ranks_[0]->comm ? "none" : ranks_[0]->comm->backend_name();
}

void TpExecutor::Rank::release() noexcept {
  logits = Tensor();
  cache = backend::PagedKvCache();
  model.reset();
  comm.reset();  // waits for its stream, which the backend still owns
  backend.reset();
}

TpExecutor::~TpExecutor() { stop(); }

void TpExecutor::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  job_ready_.notify_all();
  for (auto& rank : ranks_) {
    if (rank->thread.joinable()) rank->thread.join();
  }
}

void TpExecutor::work(Rank& rank) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(Rank&)>* job = nullptr;
    {
      std::unique_lock lock(mutex_);
      job_ready_.wait(lock, [&] { return stopping_ || job_id_ != seen; });
      if (stopping_) break;
      seen = job_id_;
      job = job_;
    }
    try {
      (*job)(rank);
    } catch (...) {
      rank.error = std::current_exception();
      if (rank.comm) {
        rank.comm->abort(describe(rank.error));
      } else if (group_) {
        group_->abort(rank.index, describe(rank.error));
      }
    }
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) job_done_.notify_all();
    }
  }
  rank.release();  // on this thread: a CUDA rank's device is current here
}

void TpExecutor::run_job(const std::function<void(Rank&)>& job) {
  for (auto& rank : ranks_) rank->error = nullptr;
  std::unique_lock lock(mutex_);
  job_ = &job;
  pending_ = static_cast<int>(ranks_.size());
  ++job_id_;
  job_ready_.notify_all();
  job_done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

void TpExecutor::run_on_all(const std::function<void(Rank&)>& job, bool rebuild_on_failure) {
  if (broken_) {
    throw Error(ErrorKind::kDeviceFailure,
                fmt::format("the tensor-parallel group ({}) failed and could not be built again",
                            comm::comm_kind_name(config_.comm_plan.kind)),
                "restart the server; see the earlier error for the cause");
  }
  run_job(job);
  // The root cause: the first rank whose error is its own, not the comm
  // failure an abort or a timeout caused in its peers.
  const Rank* failed = nullptr;
  for (const auto& rank : ranks_) {
    if (rank->error && (!failed || (is_comm_failure(failed->error) && !is_comm_failure(rank->error)))) {
      failed = rank.get();
    }
  }
  if (!failed) return;
  const std::exception_ptr root = failed->error;  // rebuilding clears the ranks' errors
  const int failed_rank = failed->index;
  if (rebuild_on_failure) rebuild_group();
  try {
    std::rethrow_exception(root);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("tensor-parallel rank {} of {}: {}", failed_rank, ranks_.size(), e.message()),
                e.hint());
  }
}

// A new group, each rank's communicator made again on its own thread. If that
// fails too, the executor is broken and every later step says so.
void TpExecutor::rebuild_group() {
  try {
    group_ = comm::make_comm_group(config_.comm_plan, config_.tp, {config_.comm_timeout, config_.all_reduce_algorithm});
    const std::function<void(Rank&)> job = [&](Rank& rank) {
      rank.comm.reset();
      rank.comm = group_->make_rank(rank.index, rank.backend ? rank.backend->stream_handle() : nullptr);
      if (rank.model) rank.model->set_communicator(rank.comm.get());
    };
    run_job(job);
    for (const auto& rank : ranks_) {
      if (rank->error) std::rethrow_exception(rank->error);
    }
  } catch (const std::exception& e) {
    broken_ = true;
    log_error("tensor parallelism: the {} group could not be built again after a failed step: {}",
              comm::comm_kind_name(config_.comm_plan.kind), e.what());
  }
}

Tensor TpExecutor::forward(const model::ForwardBatch& batch) {
  std::function<void(int)> hook = hook_;
  run_on_all([&](Rank& rank) {
    if (hook) hook(rank.index);
    rank.logits = rank.model->forward(batch, rank.cache);
  });
  Tensor logits = std::move(ranks_[0]->logits);
  for (auto& rank : ranks_) rank->logits = Tensor();
  return logits;
}

StepOutput TpExecutor::execute(const StepPlan& plan) {
  model::ForwardBatch batch = make_forward_batch(plan);
  if (batch.logit_rows.empty()) {
    // Only prefill chunks this step: the forward still wants one logits row; drop it.
    batch.logit_rows = {0};
    forward(batch);
    return {};
  }
  return {forward(batch)};
}

}  // namespace tessera::engine
