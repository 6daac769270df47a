#include "engine/engine.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/sample_step.h"

namespace tessera::engine {
namespace {

constexpr auto kRateWindow = std::chrono::seconds(5);

std::string describe(const std::exception& e) {
  if (const auto* error = dynamic_cast<const Error*>(&e)) return error->message();
  return e.what();
}

}  // namespace

void validate(const EngineConfig& c) {
  auto require = [](bool ok, const std::string& what, const char* flag) {
    if (!ok) throw Error(ErrorKind::kInvalidArgument, what, fmt::format("change {}", flag));
  };
  require(c.block_size > 0, "the KV block size must be positive", "--cache-block-seq-len");
  require(c.num_blocks > 0, "the KV cache has no blocks", "--cache-max-entry-count");
  require(c.scheduler.max_batch_size > 0, "the batch size must be positive", "--max-batch-size");
  require(c.scheduler.max_num_batched_tokens > 0, "the step token budget must be positive", "--max-prefill-token-num");
  require(c.session_len > 1, "the session length must be at least 2 tokens", "--session-len");
  require(c.session_len <= c.num_blocks * c.block_size,
          fmt::format("a session of {} tokens does not fit {} KV blocks of {} tokens", c.session_len, c.num_blocks,
                      c.block_size),
          "--session-len or --cache-max-entry-count");
}

Engine::Engine(const EngineConfig& config, std::unique_ptr<Executor> executor)
    : config_((validate(config), config)),
      executor_(std::move(executor)),
      kv_(config.num_blocks, config.block_size, config.enable_prefix_caching),
      scheduler_(config.scheduler, StopConfig{config.eos_ids, config.session_len}, kv_) {
  TESSERA_CHECK(executor_ != nullptr);
  stats_.kv = kv_.stats();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(); }

void Engine::stop() noexcept {
  try {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  } catch (...) {
    // join can only fail on a broken thread; there is nothing left to do.
  }
}

std::shared_ptr<RequestStream> Engine::submit(Request request, std::function<void()> notify) {
  validate(request, config_.session_len, executor_->vocab_size());
  request.id = next_id_++;
  auto stream = std::make_shared<RequestStream>(request.id, std::move(notify));
  {
    std::lock_guard lock(mutex_);
    if (!healthy_ || stopping_) {
      TokenEvent last;
      last.finish = healthy_ ? FinishReason::kAbort : FinishReason::kError;
      if (!healthy_) last.error_kind = ErrorKind::kDeviceFailure;
      last.error = healthy_ ? "the engine is stopping" : "the engine is unhealthy after a device failure";
      stream->push(std::move(last));
      return stream;
    }
    inbox_.emplace_back(std::make_unique<Sequence>(std::move(request)), stream);
  }
  wake_.notify_all();
  return stream;
}

void Engine::abort(RequestId id) {
  {
    std::lock_guard lock(mutex_);
    aborts_.push_back(id);
  }
  wake_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mutex_);
  EngineStats s = stats_;
  s.waiting += static_cast<int64_t>(inbox_.size());
  s.healthy = healthy_;
  return s;
}

void Engine::loop() {
  while (take_inbox()) step();
  end_all(healthy_ ? FinishReason::kAbort : FinishReason::kError,
          healthy_ ? "the engine stopped" : "the engine is unhealthy after a device failure",
          healthy_ ? std::nullopt : std::optional<ErrorKind>(ErrorKind::kDeviceFailure));
}

// Waits while there is nothing to do; moves new requests and aborts in.
// Returns false when the loop must end.
bool Engine::take_inbox() {
  decltype(inbox_) arrived;
  std::vector<RequestId> aborted;
  {
    std::unique_lock lock(mutex_);
    auto news = [&] { return stopping_ || !healthy_ || !inbox_.empty() || !aborts_.empty(); };
    // A stalled scheduler (work, but nothing fits this step) is retried after a pause.
    if (stalled_) {
      wake_.wait_for(lock, std::chrono::milliseconds(2), news);
    } else {
      wake_.wait(lock, [&] { return news() || !scheduler_.empty(); });
    }
    if (stopping_ || !healthy_) return false;
    arrived.swap(inbox_);
    aborted.swap(aborts_);
  }
  for (auto& [seq, stream] : arrived) {
    streams_.emplace(seq->id(), std::move(stream));
    scheduler_.add(std::move(seq));
  }
  for (RequestId id : aborted) {
    if (scheduler_.remove(id)) finish(id, FinishReason::kAbort);
  }
  return true;
}

void Engine::step() {
  StepPlan plan = scheduler_.schedule();
  stalled_ = plan.empty();
  if (plan.empty()) return publish_stats(plan, {});
  std::vector<SequenceUpdate> updates;
  try {
    if (executor_->samples_on_device()) {
      plan.device_sampling = device_sampling_batch(plan, scheduler_, executor_->vocab_size());
    }
    StepOutput output = executor_->execute(plan);
    for (PromptLogprobs& p : prompt_logprobs_step(plan, output, scheduler_)) {
      if (auto it = streams_.find(p.id); it != streams_.end()) {
        TokenEvent event;
        event.prompt_logprobs = std::move(p.tokens);
        it->second->push(std::move(event));
      }
    }
    updates = scheduler_.update(plan, sample_step(plan, output, scheduler_));
  } catch (const Error& e) {
    fail_step(plan, e.kind(), describe(e));
  } catch (const std::exception& e) {
    fail_step(plan, ErrorKind::kInternal, describe(e));
  }
  publish_stats(plan, updates);  // first, so a client that saw its last event sees it counted
  emit(updates);
}

void Engine::emit(const std::vector<SequenceUpdate>& updates) {
  for (const SequenceUpdate& u : updates) {
    auto it = streams_.find(u.id);
    if (it == streams_.end()) continue;
    TokenEvent event;
    event.token = u.sample.token;
    event.logprob = u.sample.logprob;
    event.top_logprobs = u.sample.top_logprobs;
    event.finish = u.finish;
    event.stop_token = u.stop_token;
    it->second->push(std::move(event));
    if (u.finish) streams_.erase(it);
  }
}

void Engine::finish(RequestId id, FinishReason reason, std::string error, std::optional<ErrorKind> kind) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  TokenEvent last;
  last.finish = reason;
  last.error = std::move(error);
  last.error_kind = kind;
  {
    std::lock_guard lock(mutex_);
    ++stats_.finished_requests;
    if (reason == FinishReason::kError) ++stats_.failed_requests;
    stats_.running = scheduler_.num_running();
    stats_.waiting = scheduler_.num_waiting();
    stats_.kv = kv_.stats();
  }
  it->second->push(std::move(last));
  streams_.erase(it);
}

void Engine::fail_step(const StepPlan& plan, ErrorKind kind, const std::string& message) {
  if (kind == ErrorKind::kDeviceFailure) {
    log_error("device failure, the engine stops: {}", message);
    healthy_ = false;
    end_all(FinishReason::kError, message, kind);
    return;
  }
  log_error("a step of {} requests failed: {}", plan.chunks.size(), message);
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (scheduler_.remove(chunk.id)) finish(chunk.id, FinishReason::kError, message, kind);
  }
}

void Engine::end_all(FinishReason reason, const std::string& error, std::optional<ErrorKind> kind) {
  {
    std::lock_guard lock(mutex_);
    for (auto& [seq, stream] : inbox_) streams_.emplace(seq->id(), std::move(stream));
    inbox_.clear();
    aborts_.clear();
  }
  for (RequestId id : scheduler_.ids()) scheduler_.remove(id);
  std::vector<RequestId> ids;
  for (const auto& [id, stream] : streams_) ids.push_back(id);
  for (RequestId id : ids) finish(id, reason, error, kind);
}

void Engine::publish_stats(const StepPlan& plan, const std::vector<SequenceUpdate>& updates) {
  const auto now = Clock::now();
  const int64_t sampled = static_cast<int64_t>(updates.size());
  std::lock_guard lock(mutex_);
  EngineStats& s = stats_;
  for (const SequenceUpdate& u : updates) s.finished_requests += u.finish ? 1 : 0;
  s.running = scheduler_.num_running();
  s.waiting = scheduler_.num_waiting();
  s.kv = kv_.stats();
  if (plan.empty()) return;
  ++s.steps;
  s.computed_tokens += plan.num_tokens;
  s.generated_tokens += sampled;
  s.preemptions += static_cast<int64_t>(plan.preempted.size());
  window_.push_back({now, {plan.num_tokens, sampled}});
  while (now - window_.front().first > kRateWindow) window_.pop_front();
  const double seconds = std::max(1e-3, std::chrono::duration<double>(now - window_.front().first).count());
  int64_t computed = 0, generated = 0;
  for (const auto& [t, counts] : window_) {
    computed += counts.first;
    generated += counts.second;
  }
  s.computed_tokens_per_second = window_.size() > 1 ? computed / seconds : 0.0;
  s.generated_tokens_per_second = window_.size() > 1 ? generated / seconds : 0.0;
}

}  // namespace tessera::engine
