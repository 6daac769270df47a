#include "engine/tp_executor.h"

#include <fmt/format.h>

#include "comm/thread_communicator.h"
#include "core/error.h"
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
  if (!config_.make_backend) config_.make_backend = [](int) { return backend::make_cpu_backend(); };
  comms_ = comm::make_thread_communicators(config_.tp, {config_.comm_timeout});
  for (int r = 0; r < config_.tp; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->index = r;
    ranks_.push_back(std::move(rank));
  }
  for (auto& rank : ranks_) rank->thread = std::thread([this, r = rank.get()] { work(*r); });
  try {
    run_on_all([&](Rank& rank) {
      rank.backend = config_.make_backend(rank.index);
      rank.model = model::make_transformer(model, *rank.backend, comms_[rank.index].get());
      rank.cache = rank.model->allocate_cache(config_.num_blocks, config_.block_size);
    });
  } catch (...) {
    stop();
    throw;
  }
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
      if (stopping_) return;
      seen = job_id_;
      job = job_;
    }
    try {
      (*job)(rank);
    } catch (...) {
      rank.error = std::current_exception();
      comms_[rank.index]->abort(describe(rank.error));
    }
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) job_done_.notify_all();
    }
  }
}

void TpExecutor::run_on_all(const std::function<void(Rank&)>& job) {
  for (auto& rank : ranks_) rank->error = nullptr;
  {
    std::unique_lock lock(mutex_);
    job_ = &job;
    pending_ = static_cast<int>(ranks_.size());
    ++job_id_;
    job_ready_.notify_all();
    job_done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }
  // The root cause: the first rank whose error is its own, not the comm
  // failure an abort or a timeout caused in its peers.
  const Rank* failed = nullptr;
  for (const auto& rank : ranks_) {
    if (rank->error && (!failed || (is_comm_failure(failed->error) && !is_comm_failure(rank->error)))) {
      failed = rank.get();
    }
  }
  if (!failed) return;
  rebuild_group();
  try {
    std::rethrow_exception(failed->error);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("tensor-parallel rank {} of {}: {}", failed->index, ranks_.size(), e.message()),
                e.hint());
  }
}

void TpExecutor::rebuild_group() {
  comms_ = comm::make_thread_communicators(config_.tp, {config_.comm_timeout});
  for (auto& rank : ranks_) {
    if (rank->model) rank->model->set_communicator(comms_[rank->index].get());
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
