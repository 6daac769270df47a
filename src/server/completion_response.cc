#include "server/completion_response.h"

#include <algorithm>
#include <cmath>

#include "server/api_error.h"
#include "server/sse.h"

namespace tessera::server {

namespace {

using Json = nlohmann::ordered_json;

// JSON has no -infinity; a token that could not be drawn gets OpenAI-clients' usual floor.
double finite(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

Json bytes_of(const std::string& s) {
  Json bytes = Json::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

CompletionResponse::CompletionResponse(CompletionMeta meta, std::vector<std::unique_ptr<Generation>> generations,
                                       int64_t prompt_tokens, std::vector<Echo> echoes,
                                       std::shared_ptr<Notifier> notifier, std::function<void(unsigned)> on_done)
    : meta_(std::move(meta)),
      prompt_tokens_(prompt_tokens),
      notifier_(std::move(notifier)),
      on_done_(std::move(on_done)) {
  const size_t per_prompt = echoes.empty() ? 0 : generations.size() / echoes.size();
  for (std::unique_ptr<Generation>& generation : generations) {
    Choice& choice = choices_.emplace_back();
    if (per_prompt > 0) {
      choice.echo = echoes[(choices_.size() - 1) / per_prompt];
      choice.text = choice.echo->text;
    }
    choice.generation = std::move(generation);
    choice.logprobs = empty_logprobs();
    if (meta_.stream && meta_.markup.reasoning) choice.reasoning_stream.emplace(*meta_.markup.reasoning);
    if (meta_.stream && meta_.markup.tools) choice.tool_stream.emplace(*meta_.markup.tools);
  }
}

CompletionResponse::~CompletionResponse() { cancel(); }

void CompletionResponse::start(std::function<void()> wake) { notifier_->set(std::move(wake)); }

void CompletionResponse::cancel() noexcept {
  notifier_->set({});
  for (Choice& choice : choices_) {
    try {
      choice.generation->cancel();
    } catch (...) {
      // Aborting only queues an id; nothing here can fail in a way the client could see.
    }
  }
  done(499);  // nginx's "client closed request"; counted, never sent
}

void CompletionResponse::done(unsigned status) {
  if (done_) return;
  done_ = true;
  if (on_done_) on_done_(status);
}

Json CompletionResponse::usage() const {
  int64_t completion_tokens = 0;
  for (const Choice& choice : choices_) completion_tokens += choice.generation->completion_tokens();
  return Json{{"prompt_tokens", prompt_tokens_},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens_ + completion_tokens}};
}

std::vector<const CompletionResponse::Choice*> CompletionResponse::listed_choices() const {
  std::vector<const Choice*> out;
  if (!meta_.best_of) {
    for (const Choice& choice : choices_) out.push_back(&choice);
    return out;
  }
  // Each prompt's candidates, likeliest first (the earlier on a tie), the first `keep`.
  const size_t per_prompt = static_cast<size_t>(meta_.best_of->candidates);
  for (size_t first = 0; first < choices_.size(); first += per_prompt) {
    std::vector<const Choice*> group;
    for (size_t i = first; i < std::min(first + per_prompt, choices_.size()); ++i) group.push_back(&choices_[i]);
    std::stable_sort(group.begin(), group.end(), [](const Choice* a, const Choice* b) {
      return a->generation->cumulative_logprob() > b->generation->cumulative_logprob();
    });
    group.resize(std::min(group.size(), static_cast<size_t>(meta_.best_of->keep)));
    out.insert(out.end(), group.begin(), group.end());
  }
  return out;
}

Json CompletionResponse::empty_logprobs() const {
  return meta_.kind == CompletionKind::kChat
             ? Json{{"content", Json::array()}}
             : Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()},
                    {"top_logprobs", Json::array()}, {"text_offset", Json::array()}};
}

// OpenAI's tool_calls: each call with a new id (random: a conversation's ids
// must not repeat across its turns); a stream's deltas carry their index too.
Json CompletionResponse::tool_calls_json(const std::vector<text::ToolCall>& calls, bool streaming) const {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json call;
    if (streaming) call["index"] = i;
    call["id"] = text::tool_call_id(*meta_.markup.tools);
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

Json CompletionResponse::chunk_json(Json choice) const {
  Json chunk = {{"id", meta_.id},
                {"object", meta_.kind == CompletionKind::kChat ? "chat.completion.chunk" : "text_completion"},
                {"created", meta_.created},
                {"model", meta_.model},
                {"choices", Json::array({std::move(choice)})}};
  if (meta_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

void CompletionResponse::append_logprobs(Json& into, const std::vector<TokenLogprobText>& logprobs, size_t offset) const {
  for (const TokenLogprobText& t : logprobs) {
    if (meta_.kind == CompletionKind::kChat) {
      Json top = Json::array();
      for (const auto& [token, lp] : t.top) {
        top.push_back({{"token", token}, {"logprob", finite(lp)}, {"bytes", bytes_of(token)}});
      }
      into["content"].push_back(
          {{"token", t.token}, {"logprob", finite(t.logprob)}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
    } else {
      Json top = Json::object();
      for (const auto& [token, lp] : t.top) top[token] = finite(lp);
      into["tokens"].push_back(t.token);
      into["token_logprobs"].push_back(finite(t.logprob));
      into["top_logprobs"].push_back(top);
      into["text_offset"].push_back(offset);
      offset += t.token.size();
    }
  }
}

void CompletionResponse::append_echo_logprobs(Json& into, const Choice& c) const {
  into["tokens"].push_back(c.echo->first_token);
  into["token_logprobs"].push_back(nullptr);
  into["top_logprobs"].push_back(nullptr);
  into["text_offset"].push_back(0);
  append_logprobs(into, c.generation->prompt_logprobs(), c.echo->first_token.size());
}

Json CompletionResponse::logprobs_json(const std::vector<TokenLogprobText>& logprobs, size_t text_offset) const {
  Json out = empty_logprobs();
  append_logprobs(out, logprobs, text_offset);
  return out;
}

void CompletionResponse::stream_choice(size_t index, Choice& c, GenerationDelta delta, size_t offset_before,
                                       std::string& chunk) {
  const bool chat = meta_.kind == CompletionKind::kChat;
  const Generation& generation = *c.generation;
  if (c.echo && !c.echo_done && generation.error().empty() &&
      (generation.completion_tokens() > 0 || generation.finished())) {
    Json logprobs = nullptr;
    if (meta_.logprobs) {
      logprobs = empty_logprobs();
      append_echo_logprobs(logprobs, c);
    }
    chunk += sse_event(chunk_json(
        {{"index", index}, {"text", c.echo->text}, {"logprobs", std::move(logprobs)}, {"finish_reason", nullptr}}));
    c.echo_done = true;
  }
  if (chat && !c.role_sent) {
    chunk += sse_event(chunk_json({{"index", index},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}));
    c.role_sent = true;
  }
  std::string reasoning;
  if (c.reasoning_stream) {
    text::ReasoningText piece = c.reasoning_stream->feed(delta.text);
    if (generation.finished()) {
      text::ReasoningText rest = c.reasoning_stream->finish();
      piece.reasoning += rest.reasoning;
      piece.content += rest.content;
    }
    reasoning = std::move(piece.reasoning);
    delta.text = std::move(piece.content);
  }
  if (c.tool_stream) delta.text = c.tool_stream->feed(delta.text);
  if (!delta.empty() || !reasoning.empty()) {
    Json choice = {{"index", index}};
    if (chat && !reasoning.empty()) {
      choice["delta"] = {{"reasoning_content", reasoning}};
      if (!delta.text.empty()) choice["delta"]["content"] = delta.text;
    } else if (chat) {
      choice["delta"] = {{"content", delta.text}};
    } else {
      choice["text"] = delta.text;
    }
    choice["logprobs"] = meta_.logprobs ? logprobs_json(delta.logprobs, offset_before) : Json(nullptr);
    choice["finish_reason"] = nullptr;
    chunk += sse_event(chunk_json(std::move(choice)));
  }
  if (!generation.finished() || !generation.error().empty()) return;
  std::string finish_reason = *generation.finish_reason();
  if (c.tool_stream) {
    text::ToolCallText rest = c.tool_stream->finish();
    Json delta_rest = Json::object();
    if (!rest.content.empty()) delta_rest["content"] = rest.content;
    if (!rest.calls.empty()) {
      delta_rest["tool_calls"] = tool_calls_json(rest.calls, /*streaming=*/true);
      finish_reason = "tool_calls";
    }
    if (!delta_rest.empty()) {
      chunk += sse_event(chunk_json(
          {{"index", index}, {"delta", std::move(delta_rest)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}));
    }
  }
  Json choice = {{"index", index}};
  if (chat) {
    choice["delta"] = Json::object();
  } else {
    choice["text"] = "";
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  chunk += sse_event(chunk_json(std::move(choice)));
  c.ended = true;
}

Json CompletionResponse::choice_json(size_t index, const Choice& c) const {
  Json choice = {{"index", index}};
  std::string finish_reason = *c.generation->finish_reason();
  if (meta_.kind == CompletionKind::kChat) {
    std::string content = c.text;
    Json message = {{"role", "assistant"}};
    if (meta_.markup.reasoning) {
      text::ReasoningText split = text::split_reasoning(*meta_.markup.reasoning, c.text);
      message["reasoning_content"] = std::move(split.reasoning);
      content = std::move(split.content);
    }
    std::vector<text::ToolCall> calls;
    if (meta_.markup.tools) {
      text::ToolCallText parsed = text::parse_tool_calls(*meta_.markup.tools, content);
      calls = std::move(parsed.calls);
      if (!calls.empty()) content = std::move(parsed.content);
    }
    // With markup, an answer that is all reasoning or all calls has no content (null, as OpenAI sends it).
    const bool blank = content.find_first_not_of(" \t\r\n") == std::string::npos;
    message["content"] = blank && (meta_.markup.reasoning || !calls.empty()) ? Json(nullptr) : Json(content);
    if (!calls.empty()) {
      message["tool_calls"] = tool_calls_json(calls, /*streaming=*/false);
      finish_reason = "tool_calls";
    }
    choice["message"] = std::move(message);
  } else {
    choice["text"] = c.text;
  }
  choice["logprobs"] = meta_.logprobs ? c.logprobs : Json(nullptr);
  choice["finish_reason"] = finish_reason;
  return choice;
}

bool CompletionResponse::poll(std::string& chunk, HttpResponse& response) {
  if (done_) return true;
  bool all_finished = true;
  const Generation* failed = nullptr;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    if (c.ended) continue;
    const size_t offset_before = c.text.size();
    GenerationDelta delta = c.generation->poll();
    c.text += delta.text;
    if (meta_.stream) {
      stream_choice(i, c, std::move(delta), offset_before, chunk);
    } else {
      // The prompt is scored before the first token comes: its logprobs lead.
      if (c.echo && !c.echo_done && (c.generation->completion_tokens() > 0 || c.generation->finished())) {
        if (meta_.logprobs) append_echo_logprobs(c.logprobs, c);
        c.echo_done = true;
      }
      if (meta_.logprobs) append_logprobs(c.logprobs, delta.logprobs, offset_before);
    }
    if (!c.generation->finished()) {
      all_finished = false;
    } else if (!c.generation->error().empty()) {
      failed = c.generation.get();
      break;
    }
  }
  if (failed) {
    // One choice failed: the answer ends with its error; the others are aborted.
    const unsigned status = failed->engine_unavailable() ? 503 : 500;
    const std::string body = error_body(status, failed->error());
    for (Choice& c : choices_) c.generation->cancel();
    if (meta_.stream) {
      chunk += sse_event(Json::parse(body));
      chunk += sse_done();
      done(200);
    } else {
      response.status = status;
      response.body = body;
      done(status);
    }
    return true;
  }
  if (!all_finished) return false;

  if (meta_.stream) {
    if (meta_.include_usage) {
      Json last = chunk_json(nullptr);
      last["choices"] = Json::array();
      last["usage"] = usage();
      chunk += sse_event(last);
    }
    chunk += sse_done();
    done(200);
    return true;
  }
  const bool chat = meta_.kind == CompletionKind::kChat;
  Json choices = Json::array();
  const std::vector<const Choice*> listed = listed_choices();
  for (size_t i = 0; i < listed.size(); ++i) choices.push_back(choice_json(i, *listed[i]));
  Json body = {{"id", meta_.id},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", meta_.created},
               {"model", meta_.model},
               {"choices", std::move(choices)},
               {"usage", usage()}};
  response.status = 200;
  response.body = dump_json(body);
  done(200);
  return true;
}

}  // namespace tessera::server
