// RequestStream: the events of one request, from the engine thread to whoever
// serves the request (an HTTP handler, a test). Thread-safe; one producer (the
// engine loop), any number of consumers, though one is the normal case.
//
// Every request ends with exactly one event whose `finish` is set; after it
// nothing more is pushed. An aborted or failed request's last event may carry
// no token (token == -1).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/request.h"
#include "engine/sampler.h"

namespace tessera::engine {

struct TokenEvent {
  int32_t token = -1;                      // the new token; -1 when none
  float logprob = 0.0f;                    // when the request asked for logprobs
  std::vector<TokenLogprob> top_logprobs;  // likeliest first
  // Request::prompt_logprobs: prompt tokens' logprobs, in order, in events
  // with no token of their own, before the first sampled token.
  std::vector<PromptTokenLogprob> prompt_logprobs;
  std::optional<FinishReason> finish;      // set on the last event only
  // finish kStop because `token` is an eos or stop id: the token is not part
  // of the text (a structured output that is done ends on a token of its text).
  bool stop_token = false;
  std::optional<ErrorKind> error_kind;     // finish == kError: kDeviceFailure means the engine is down (HTTP 503)
  std::string error;                       // finish == kError: what failed

  bool has_token() const { return token >= 0; }
  bool last() const { return finish.has_value(); }
};

class RequestStream {
 public:
  // `notify` (optional) runs on the engine thread after each push: keep it short
  // (e.g. wake an event loop); it must not call back into the engine.
  RequestStream(RequestId id, std::function<void()> notify = {}) : id_(id), notify_(std::move(notify)) {}

  RequestId id() const { return id_; }

  // Engine side. Events after the last one are dropped.
  void push(TokenEvent event);

  // Consumer side.
  std::optional<TokenEvent> try_next();
  TokenEvent next();  // blocks until an event is there
  std::optional<TokenEvent> next_for(std::chrono::milliseconds timeout);
  std::vector<TokenEvent> drain();  // every event queued now, maybe none
  bool finished() const;            // the last event has been pushed (maybe not yet taken)

 private:
  RequestId id_;
  std::function<void()> notify_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<TokenEvent> events_;
  bool finished_ = false;
};

}  // namespace tessera::engine
