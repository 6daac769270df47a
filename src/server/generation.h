// Generation: one engine request seen as text. It takes the request's token
// events, detokenizes them incrementally (UTF-8 safe), applies stop strings,
// keeps the logprobs the client asked for, and records the request's timings
// and counts in the metrics when it ends.
//
// Stops: a stop string ends the request as soon as it appears (the engine
// request is aborted; the finish reason is "stop" and the string is not in the
// text). A stop token id or eos (finish kStop) ends it too; that token is
// counted but its text is not part of the output (nor of the logprobs, but
// for an echo: see add_token).
//
// Not thread-safe: one owner (a pending response on its connection's strand).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "server/metrics.h"
#include "server/openai_schema.h"
#include "text/incremental_detokenizer.h"
#include "text/stop_strings.h"
#include "text/tokenizer.h"

namespace tessera::server {

struct TokenLogprobText {
  std::string token;  // the token's text
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // likeliest first
};

struct GenerationDelta {
  std::string text;
  std::vector<TokenLogprobText> logprobs;  // one per token of this delta, when asked
  bool empty() const { return text.empty() && logprobs.empty(); }
};

class Generation {
 public:
  // `engine`, `tokenizer` and `metrics` must outlive this object.
  Generation(engine::Engine& engine, const text::Tokenizer& tokenizer, Metrics& metrics,
             std::shared_ptr<engine::RequestStream> stream, const GenerationOptions& options, int64_t prompt_tokens,
             engine::Clock::time_point arrival);
  ~Generation();

  // Takes the events queued now; returns what they add (maybe nothing).
  GenerationDelta poll();
  // The client went away: aborts the engine request (no effect once finished).
  void cancel();

  bool finished() const { return finish_reason_.has_value(); }
  // "stop", "length", "abort" or "error"; set once finished.
  const std::optional<std::string>& finish_reason() const { return finish_reason_; }
  const std::string& error() const { return error_; }
  // True when the error is the engine's (down or stopping): HTTP 503 rather than 500.
  bool engine_unavailable() const { return engine_unavailable_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  // Σ of the sampled tokens' logprobs (the stop token's too), where the engine
  // request asked for logprobs: what best_of ranks candidates by.
  double cumulative_logprob() const { return cumulative_logprob_; }
  // The prompt tokens' logprobs (after the first), when the engine request
  // asked for them; complete once completion_tokens() > 0 or finished().
  const std::vector<TokenLogprobText>& prompt_logprobs() const { return prompt_logprobs_; }
  engine::RequestId id() const { return stream_->id(); }

 private:
  void add_token(const engine::TokenEvent& event, bool final_stop, GenerationDelta& delta);
  void finish(std::string reason, GenerationDelta& delta);

  engine::Engine& engine_;
  const text::Tokenizer& tokenizer_;
  Metrics& metrics_;
  std::shared_ptr<engine::RequestStream> stream_;
  bool want_logprobs_;
  bool echo_;  // a completion echoing its prompt: a stop token's logprob is listed too
  bool score_only_;  // max_tokens 0: the one token the engine generates is dropped
  text::IncrementalDetokenizer detokenizer_;
  text::StopStringMatcher stops_;
  int64_t prompt_tokens_;
  int64_t completion_tokens_ = 0;
  double cumulative_logprob_ = 0.0;
  engine::Clock::time_point arrival_;
  std::optional<engine::Clock::time_point> last_token_time_;
  double time_to_first_token_ = 0.0;
  std::vector<TokenLogprobText> prompt_logprobs_;
  std::optional<std::string> finish_reason_;
  std::string error_;
  bool engine_unavailable_ = false;
};

// The text of one token as logprobs show it.
std::string token_text(const text::Tokenizer& tokenizer, int32_t id);

}  // namespace tessera::server
