#include "server/generation.h"

#include "core/log.h"

namespace tessera::server {

namespace {
double seconds_between(engine::Clock::time_point a, engine::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

std::string token_text(const text::Tokenizer& tokenizer, int32_t id) {
  try {
    std::string text = tokenizer.decode({id}, /*skip_special=*/false);
    // Decoding one token alone drops the space a word-initial piece stands
    // for ("▁the" in SentencePiece, "Ġthe" in byte-level BPE); put it back.
    const std::string piece = tokenizer.id_to_piece(id);
    const bool leading_space = piece.rfind("\xE2\x96\x81", 0) == 0 || piece.rfind("\xC4\xA0", 0) == 0;
    if (leading_space && (text.empty() || text[0] != ' ')) text = " " + text;
    return text;
  } catch (const std::exception&) {
    return {};
  }
}

Generation::Generation(engine::Engine& engine, const text::Tokenizer& tokenizer, Metrics& metrics,
                       std::shared_ptr<engine::RequestStream> stream, const GenerationOptions& options,
                       int64_t prompt_tokens, engine::Clock::time_point arrival)
    : engine_(engine),
      tokenizer_(tokenizer),
      metrics_(metrics),
      stream_(std::move(stream)),
      want_logprobs_(options.logprobs),
      echo_(options.echo),
      score_only_(options.max_tokens == 0),
      detokenizer_(tokenizer, options.skip_special_tokens),
      stops_(options.stop),
      prompt_tokens_(prompt_tokens),
      arrival_(arrival) {}

Generation::~Generation() {
  if (!finished()) cancel();
}

GenerationDelta Generation::poll() {
  GenerationDelta delta;
  if (finished()) return delta;
  for (engine::TokenEvent& event : stream_->drain()) {
    const bool final_stop = event.finish == engine::FinishReason::kStop && event.stop_token;
    for (const engine::PromptTokenLogprob& p : event.prompt_logprobs) {
      TokenLogprobText lp{token_text(tokenizer_, p.token), p.logprob, {}};
      for (const engine::TokenLogprob& t : p.top_logprobs) lp.top.emplace_back(token_text(tokenizer_, t.token), t.logprob);
      prompt_logprobs_.push_back(std::move(lp));
    }
    if (event.has_token()) add_token(event, final_stop, delta);
    if (finished()) break;  // a stop string matched
    if (event.last()) {
      if (*event.finish == engine::FinishReason::kError) {
        error_ = event.error;
        engine_unavailable_ = event.error_kind == ErrorKind::kDeviceFailure;
      } else if (*event.finish == engine::FinishReason::kAbort) {
        error_ = "the request was aborted: the server is stopping";
        engine_unavailable_ = true;
      }
      finish(engine::finish_reason_name(*event.finish), delta);
      break;
    }
  }
  return delta;
}

void Generation::add_token(const engine::TokenEvent& event, bool final_stop, GenerationDelta& delta) {
  const auto now = engine::Clock::now();
  if (!last_token_time_) {
    time_to_first_token_ = seconds_between(arrival_, now);
    metrics_.time_to_first_token.observe(time_to_first_token_);
  } else {
    metrics_.inter_token_latency.observe(seconds_between(*last_token_time_, now));
  }
  last_token_time_ = now;
  if (score_only_) return;  // max_tokens 0: nothing generated is part of the answer
  ++completion_tokens_;
  cumulative_logprob_ += event.logprob;
  auto add_logprob = [&] {
    TokenLogprobText lp{token_text(tokenizer_, event.token), event.logprob, {}};
    for (const engine::TokenLogprob& t : event.top_logprobs) lp.top.emplace_back(token_text(tokenizer_, t.token), t.logprob);
    delta.logprobs.push_back(std::move(lp));
  };
  if (final_stop) {
    // The stop token or eos: counted, not shown. A scored echo lists it all
    // the same: its reader (lm-evaluation-harness) drops the last entry as
    // the one generated token.
    if (want_logprobs_ && echo_) add_logprob();
    return;
  }
  text::StopStringMatcher::Result piece = stops_.feed(detokenizer_.push(event.token));
  delta.text += piece.text;
  if (want_logprobs_) add_logprob();
  if (piece.stop_index) {
    engine_.abort(stream_->id());
    finish("stop", delta);
  }
}

void Generation::finish(std::string reason, GenerationDelta& delta) {
  if (score_only_ && reason == "stop") reason = "length";  // the limit of 0 ended it, not a stop token
  if (!stops_.stopped()) delta.text += stops_.feed(detokenizer_.finish()).text;
  if (!stops_.stopped()) delta.text += stops_.finish();
  finish_reason_ = std::move(reason);
  const double total = seconds_between(arrival_, engine::Clock::now());
  metrics_.request_latency.observe(total);
  metrics_.count_finish(*finish_reason_);
  metrics_.add_tokens(prompt_tokens_, completion_tokens_);
  log_info("request {}: {} prompt + {} completion tokens, first token {:.3f} s, total {:.3f} s, finish {}{}", id(),
           prompt_tokens_, completion_tokens_, time_to_first_token_, total, *finish_reason_,
           error_.empty() ? "" : " (" + error_ + ")");
}

void Generation::cancel() {
  if (finished()) return;
  engine_.abort(stream_->id());
  metrics_.count_client_disconnect();
  GenerationDelta ignored;
  finish("abort", ignored);
}

}  // namespace tessera::server
