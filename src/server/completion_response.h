// The answers of /v1/chat/completions and /v1/completions: a PendingResponse
// that turns a Generation into OpenAI's JSON, either one body at the end or
// SSE chunks as the text grows (chat: chat.completion(.chunk); text:
// text_completion).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation.h"
#include "server/http_types.h"
#include "text/reasoning.h"
#include "text/tool_calls.h"

namespace tessera::server {

enum class CompletionKind { kChat, kText };

// The engine's notify callback, which exists before the connection's wake does.
class Notifier {
 public:
  void set(std::function<void()> wake) {
    std::lock_guard lock(mutex_);
    wake_ = std::move(wake);
  }
  void notify() {
    std::lock_guard lock(mutex_);
    if (wake_) wake_();
  }

 private:
  std::mutex mutex_;
  std::function<void()> wake_;
};

// What a chat answer's text holds besides its content: reasoning (split
// into reasoning_content, first) and tool calls in the content that follows
// (tool_calls, finish_reason "tool_calls"; the text before them stays the content).
struct AnswerMarkup {
  std::optional<text::ToolCallFormat> tools;
  std::optional<text::ReasoningFormat> reasoning;
};

// A completion's echo of its prompt: the text the answer starts with, and
// the prompt's first token (listed first in logprobs, with none of its own).
struct Echo {
  std::string text;
  std::string first_token;
};

struct CompletionMeta {
  CompletionKind kind = CompletionKind::kChat;
  std::string id;     // "chatcmpl-..." / "cmpl-..."
  std::string model;
  int64_t created = 0;  // unix seconds
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  AnswerMarkup markup;
  // best_of > n (not streamed): each prompt's `candidates` generations, of
  // which the body lists the `keep` with the highest cumulative logprob.
  struct BestOf {
    int32_t candidates = 0;
    int32_t keep = 0;
  };
  std::optional<BestOf> best_of;
};

// One answer of several choices: each choice (n per prompt, prompts in
// order) is a Generation of its own; the body, or the stream's [DONE], comes
// once every choice has finished. An error in any choice ends the answer.
class CompletionResponse : public PendingResponse {
 public:
  // `on_done` runs once, when the answer is complete or cancelled (it releases
  // the in-flight slot and counts the response). `prompt_tokens`: the
  // prompts' tokens, each prompt counted once however many choices it has.
  // `echoes`: one per prompt (each prompt's choices start with it), or none.
  CompletionResponse(CompletionMeta meta, std::vector<std::unique_ptr<Generation>> generations, int64_t prompt_tokens,
                     std::vector<Echo> echoes, std::shared_ptr<Notifier> notifier,
                     std::function<void(unsigned status)> on_done);
  ~CompletionResponse() override;

  bool streaming() const override { return meta_.stream; }
  void start(std::function<void()> wake) override;
  bool poll(std::string& chunk, HttpResponse& response) override;
  void cancel() noexcept override;

 private:
  struct Choice {
    std::unique_ptr<Generation> generation;
    std::string text;                // everything so far
    nlohmann::ordered_json logprobs;  // non-streaming: accumulated
    std::optional<text::ReasoningStream> reasoning_stream;  // streaming with reasoning: splits it off
    std::optional<text::ToolCallStream> tool_stream;        // streaming with tools: holds what may be a call
    bool role_sent = false;
    bool ended = false;  // streaming: its finish chunk is sent
    std::optional<Echo> echo;  // text starts with echo->text; its logprobs lead once the prompt is scored
    bool echo_done = false;    // the echo's logprobs are in (streaming: its chunk is sent)
  };

  // Streaming: the chunks one poll of choice `index` adds (its finish chunk
  // once it has finished without an error).
  void stream_choice(size_t index, Choice& choice, GenerationDelta delta, size_t offset_before, std::string& chunk);
  // Not streaming: the choice's entry of the body.
  nlohmann::ordered_json choice_json(size_t index, const Choice& choice) const;
  nlohmann::ordered_json empty_logprobs() const;
  // The echo's entries (the first token with nulls, then the prompt's
  // logprobs) appended to completion-style logprobs.
  void append_echo_logprobs(nlohmann::ordered_json& into, const Choice& choice) const;
  nlohmann::ordered_json chunk_json(nlohmann::ordered_json choice) const;
  nlohmann::ordered_json usage() const;
  // The choices the body lists, in order: all, or each prompt's best_of picks.
  std::vector<const Choice*> listed_choices() const;
  nlohmann::ordered_json logprobs_json(const std::vector<TokenLogprobText>& logprobs, size_t text_offset) const;
  void append_logprobs(nlohmann::ordered_json& into, const std::vector<TokenLogprobText>& logprobs, size_t offset) const;
  void done(unsigned status);
  nlohmann::ordered_json tool_calls_json(const std::vector<text::ToolCall>& calls, bool streaming) const;

  CompletionMeta meta_;
  std::vector<Choice> choices_;
  int64_t prompt_tokens_;
  std::shared_ptr<Notifier> notifier_;
  std::function<void(unsigned)> on_done_;
  bool done_ = false;
};

}  // namespace tessera::server
