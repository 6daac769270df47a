#include "engine/tp_executor.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/cpu_executor.h"
#include "engine/step_message.h"
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

// An Error's message alone (what() adds its kind and hint).
std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.message();
  } catch (...) {
    return describe(error);
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
  const int local = multi_node() ? static_cast<int>(config_.nodes->links.size()) : config_.tp;
  const int first_rank = multi_node() ? config_.nodes->first_rank : 0;
  const bool cpu_ranks = plan.kind == comm::CommKind::kThread || plan.kind == comm::CommKind::kTcp;
  if (!cpu_ranks && static_cast<int>(plan.devices.size()) != local) {
    throw Error(ErrorKind::kInternal, fmt::format("a {} plan with {} devices for {} ranks",
                                                  comm::comm_kind_name(plan.kind), plan.devices.size(), local));
  }
  if (!config_.make_backend) {
    if (cpu_ranks) {
      config_.make_backend = [](int) { return backend::make_cpu_backend(); };
    } else {
      config_.make_backend = [devices = plan.devices, dtype = config_.compute_dtype](int rank) {
        return backend::make_cuda_backend(devices[rank], dtype);
      };
    }
  }
  const comm::CommGroupOptions options{config_.comm_timeout, config_.all_reduce_algorithm};
  if (!multi_node()) {
    group_ = comm::make_comm_group(plan, config_.tp, options);
  } else if (plan.kind == comm::CommKind::kNccl) {
    if (!config_.nodes->nccl_id) throw Error(ErrorKind::kInternal, "a multi-node NCCL group without node 0's id");
    group_ = comm::make_nccl_node_group(plan.devices, first_rank, config_.tp, *config_.nodes->nccl_id, options);
  } else if (plan.kind != comm::CommKind::kTcp) {
    throw Error(ErrorKind::kInternal,
                fmt::format("a {} group cannot span nodes", comm::comm_kind_name(plan.kind)));
  }  // CPU ranks over several nodes: their host links are the communicators
  for (int r = 0; r < local; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->index = r;
    rank->global = first_rank + r;
    if (multi_node()) rank->link = std::move(config_.nodes->links[r]);
    ranks_.push_back(std::move(rank));
  }
  for (auto& rank : ranks_) rank->thread = std::thread([this, r = rank.get()] { work(*r); });
  try {
    run_on_all([&](Rank& rank) {
      rank.backend = config_.make_backend(rank.index);
      rank.backend->keep_free_after_weights(config_.memory_after_weights,
                                            comm::ranks_on_device_of(config_.comm_plan, rank.index));
      if (group_) rank.comm = group_->make_rank(rank.global, rank.backend->stream_handle());
      rank.model = model::make_transformer(model, *rank.backend, rank.collectives());
      rank.model->set_kv_cache_format(config_.kv_cache_format);
      rank.cache = rank.model->allocate_cache(config_.num_blocks, config_.block_size);
    }, /*rebuild_on_failure=*/false);
  } catch (...) {
    stop();
    throw;
  }
  device_sampling_ = ranks_[0]->global == 0 && device_sampling_wanted(*ranks_[0]->model);
}

std::string TpExecutor::communicator_name() const {
  return ranks_.empty() || !ranks_[0]->collectives() ? "none" : ranks_[0]->collectives()->backend_name();
}

void TpExecutor::Rank::release() noexcept {
  cache = backend::PagedKvCache();
  model.reset();
  comm.reset();  // waits for its stream, which the backend still owns
  link.reset();
  backend.reset();
}

TpExecutor::~TpExecutor() {
  if (multi_node() && config_.nodes->first_rank == 0 && !broken_) {
    // Tell the worker nodes to leave follow(); errors (a node already gone)
    // only mean there is nobody left to tell.
    run_job([](Rank& rank) {
      if (rank.link) send_step(*rank.link, nullptr);
    });
  }
  stop();
}

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
      const std::string reason = describe(rank.error);
      if (rank.comm) {
        rank.comm->abort(reason);
      } else if (group_) {
        group_->abort(rank.global, reason);
      }
      if (rank.link) rank.link->abort(reason);  // ranks on other nodes, waiting for a step or a collective
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
                multi_node() ? fmt::format("the tensor-parallel group across nodes failed: {}", broken_reason_)
                             : fmt::format("the tensor-parallel group ({}) failed and could not be built again",
                                           comm::comm_kind_name(config_.comm_plan.kind)),
                multi_node() ? "restart every node" : "restart the server; see the earlier error for the cause");
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
  const int failed_rank = failed->global;
  if (multi_node()) {
    // A group over nodes is made once, at the rendezvous: the executor is
    // unusable from here on, and the engine must know at once.
    broken_ = true;
    broken_reason_ = fmt::format("rank {}: {}", failed_rank, message_of(root));
    throw Error(ErrorKind::kDeviceFailure,
                fmt::format("tensor-parallel rank {} of {}: {}; the group across nodes cannot be built again",
                            failed_rank, config_.tp, message_of(root)),
                "restart every node; a node that is gone is named above, and its log says why");
  }
  if (rebuild_on_failure) {
    rebuild_group();
  }
  try {
    std::rethrow_exception(root);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("tensor-parallel rank {} of {}: {}", failed_rank, config_.tp, e.message()),
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

void TpExecutor::run_forward(const model::ForwardBatch& batch, const std::function<void(Rank&)>& root) {
  std::function<void(int)> hook = hook_;
  run_on_all([&](Rank& rank) {
    if (hook) hook(rank.global);
    if (rank.link) send_step(*rank.link, &batch);
    if (rank.global == 0 && root) {
      root(rank);
    } else {
      rank.model->forward_as_peer(batch, rank.cache);
    }
  });
}

Tensor TpExecutor::forward(const model::ForwardBatch& batch) {
  Tensor logits;
  run_forward(batch, [&](Rank& rank) { logits = rank.model->forward(batch, rank.cache); });
  return logits;
}

void TpExecutor::follow() {
  if (!multi_node()) throw Error(ErrorKind::kInternal, "follow() on an executor of one process");
  std::function<void(int)> hook = hook_;
  run_on_all([&](Rank& rank) {
    while (std::optional<model::ForwardBatch> batch = receive_step(*rank.link)) {
      if (hook) hook(rank.global);
      rank.model->forward_as_peer(*batch, rank.cache);
    }
  }, /*rebuild_on_failure=*/false);
}

StepOutput TpExecutor::execute(const StepPlan& plan) {
  model::ForwardBatch batch = make_forward_batch(plan);
  if (batch.logit_rows.empty()) {
    // Only prefill chunks this step: the forward still wants one logits row; drop it.
    batch.logit_rows = {0};
    run_forward(batch, nullptr);
    return {};
  }
  StepOutput out;
  if (plan.device_sampling) {
    run_forward(batch, [&](Rank& rank) {
      out.token_ids = rank.model->forward_sample(batch, rank.cache, *plan.device_sampling);
    });
  } else {
    out.logits = forward(batch);
  }
  return out;
}

}  // namespace tessera::engine
