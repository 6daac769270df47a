// Engine: continuous batching over one Executor, on its own thread.
//
// Threads and ownership: submit, abort, stats and healthy may be called from
// any thread; they only touch the inbox and the stats snapshot under one mutex.
// Everything else — scheduler, KV metadata, sequences, the executor — belongs
// to the engine thread, whose loop is
//   take new requests and aborts → schedule → execute → sample and update → emit events.
// Each request's events go to its RequestStream (token_stream.h).
//
// Failures: an exception from a step fails that step's requests (finish
// kError with the message) and the loop goes on. An Error of kind
// kDeviceFailure marks the engine unhealthy: every request in flight ends with
// kError, the loop exits, and later submits end at once with kError
// (error_kind kDeviceFailure). The destructor stops the loop; requests still
// in flight end with kAbort. Nothing here throws out of the engine thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_config.h"
#include "engine/engine_stats.h"
#include "engine/executor.h"
#include "engine/scheduler.h"
#include "engine/token_stream.h"
#include "kv/kv_cache_manager.h"

namespace tessera::engine {

class Engine {
 public:
  // Throws Error(kInvalidArgument) for a wrong config. Starts the engine thread.
  Engine(const EngineConfig& config, std::unique_ptr<Executor> executor);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request and returns its stream (request.id is assigned here; read
  // it from the stream). Throws Error(kInvalidArgument) for an invalid request
  // (empty prompt, prompt not shorter than the session length, bad sampling
  // values). `notify` (optional) runs on the engine thread after each event.
  std::shared_ptr<RequestStream> submit(Request request, std::function<void()> notify = {});
  // Ends a request with kAbort and frees its blocks; unknown or finished ids are ignored.
  void abort(RequestId id);

  EngineStats stats() const;
  bool healthy() const { return healthy_.load(); }
  const EngineConfig& config() const { return config_; }
  // Stops the loop and ends what is in flight with kAbort. Idempotent; called by the destructor.
  void stop() noexcept;

 private:
  void loop();
  bool take_inbox();
  void step();
  void emit(const std::vector<SequenceUpdate>& updates);
  void finish(RequestId id, FinishReason reason, std::string error = {}, std::optional<ErrorKind> kind = {});
  void fail_step(const StepPlan& plan, ErrorKind kind, const std::string& message);
  void end_all(FinishReason reason, const std::string& error, std::optional<ErrorKind> kind);
  void publish_stats(const StepPlan& plan, const std::vector<SequenceUpdate>& updates);

  EngineConfig config_;
  std::unique_ptr<Executor> executor_;
  kv::KvCacheManager kv_;
  Scheduler scheduler_;
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> streams_;  // engine thread only
  bool stalled_ = false;                                                     // engine thread only

  mutable std::mutex mutex_;  // guards the inbox, stopping_ and stats_
  std::condition_variable wake_;
  std::vector<std::pair<std::unique_ptr<Sequence>, std::shared_ptr<RequestStream>>> inbox_;
  std::vector<RequestId> aborts_;
  bool stopping_ = false;
  EngineStats stats_;
  std::deque<std::pair<Clock::time_point, std::pair<int64_t, int64_t>>> window_;  // (time, (computed, sampled))

  std::atomic<bool> healthy_{true};
  std::atomic<RequestId> next_id_{1};
  std::thread thread_;
};

}  // namespace tessera::engine
