// The generation routes of ApiServer: /v1/chat/completions, /v1/completions
// and /v1/encode (request → prompt ids → engine request → CompletionResponse).
#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"
#include "server/api_server.h"
#include "server/sse.h"

namespace tessera::server {

namespace {

using Json = nlohmann::ordered_json;

void check_model(const std::string& requested, const std::string& served) {
  if (requested != served) {
    throw ApiError(404, fmt::format("the model '{}' does not exist; this server serves '{}' (see GET /v1/models)",
                                    requested, served),
                   "invalid_request_error", "model", "model_not_found");
  }
}

std::string token_string(const text::Tokenizer& tokenizer, std::optional<int32_t> id) {
  return id ? tokenizer.id_to_piece(*id) : std::string();
}

std::string render_chat(const ServingContext& ctx, const text::ChatTemplate& chat_template,
                        std::vector<text::ChatMessage> messages, bool add_generation_prompt, std::optional<Json> tools) {
  text::ChatTemplateInput input;
  input.messages = std::move(messages);
  input.add_generation_prompt = add_generation_prompt;
  input.bos_token = token_string(*ctx.tokenizer, ctx.tokenizer->bos_id());
  input.eos_token = token_string(*ctx.tokenizer, ctx.tokenizer->eos_id());
  input.tools = std::move(tools);
  try {
    return chat_template.render(input);
  } catch (const Error& e) {
    throw bad_request(fmt::format("the chat template '{}' refused the messages: {}", chat_template.name(),
                                  e.message()),
                      "messages", "invalid_value");
  }
}

std::vector<int32_t> encode_text(const text::Tokenizer& tokenizer, const std::string& text, bool add_special,
                                 const char* param) {
  try {
    return tokenizer.encode(text, add_special);
  } catch (const Error& e) {
    throw bad_request(e.message(), param, "invalid_value");
  }
}

std::string new_id(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}-{:016x}", prefix, rng());
}

std::string clip(const std::string& s, size_t limit) {
  return limit == 0 || s.size() <= limit ? s : s.substr(0, limit) + "...";
}

}  // namespace

HttpResponse ApiServer::chat_completions(const HttpRequest& request, const ServingContext& ctx) {
  ChatCompletionRequest r = parse_chat_completion_request(request.body);
  check_model(r.model, options_.model_name);
  const bool with_tools = r.tools.has_value();
  if (with_tools && !ctx.tools_template) {
    throw bad_request(fmt::format("the chat template {} does not render tools, so the model would never see them; "
                                  "start the server with --chat-template naming a template that does",
                                  ctx.chat_template->name()),
                      "tools", "unsupported_value");
  }
  const text::ChatTemplate& chat_template = with_tools ? *ctx.tools_template : *ctx.chat_template;
  if (r.force_tool_call) {
    if (!ctx.tool_call_format) {
      throw bad_request("'tool_choice' asks for a call, but this server reads no tool-call markup for the model; "
                        "start it with --tool-call-parser",
                        "tool_choice", "unsupported_value");
    }
    force_tool_call(*ctx.tool_call_format, *r.tools, *ctx.tokenizer, r.options);
  }
  const std::string prompt =
      render_chat(ctx, chat_template, std::move(r.messages), r.add_generation_prompt, std::move(r.tools));
  log_debug("chat prompt: {}", clip(prompt, options_.max_log_len));
  // The template wrote the special tokens (BOS included): none are added again.
  std::vector<int32_t> ids = encode_text(*ctx.tokenizer, prompt, /*add_special=*/false, "messages");
  std::vector<int32_t> stop_ids = r.options.ignore_eos ? std::vector<int32_t>{} : ctx.chat_stop_ids;
  AnswerMarkup markup;
  markup.tools = with_tools ? ctx.tool_call_format : std::nullopt;
  if (markup.tools) {
    // Markers that are special tokens (InternLM2's, Mistral's) must stay in the text.
    if (ctx.tool_keeps_special) r.options.skip_special_tokens = false;
    stop_ids.insert(stop_ids.end(), ctx.tool_stop_ids.begin(), ctx.tool_stop_ids.end());
  }
  markup.reasoning = ctx.reasoning_format;
  if (markup.reasoning && ctx.reasoning_keeps_special) r.options.skip_special_tokens = false;
  return start_generation(ctx, CompletionKind::kChat, {std::move(ids)}, r.options, std::move(stop_ids), markup);
}

HttpResponse ApiServer::completions(const HttpRequest& request, const ServingContext& ctx) {
  CompletionRequest r = parse_completion_request(request.body);
  check_model(r.model, options_.model_name);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Echo> echoes;
  for (CompletionPrompt& prompt : r.prompts) {
    if (prompt.text) {
      log_debug("completion prompt: {}", clip(*prompt.text, options_.max_log_len));
      prompts.push_back(encode_text(*ctx.tokenizer, *prompt.text, /*add_special=*/true, "prompt"));
    } else {
      prompts.push_back(std::move(prompt.ids));
    }
    if (r.options.echo && !prompts.back().empty()) {
      // The prompt as sent (ids: as they decode), and its first token, which has no logprob.
      const std::vector<int32_t>& ids = prompts.back();
      echoes.push_back({prompt.text ? *prompt.text : ctx.tokenizer->decode(ids, r.options.skip_special_tokens),
                        token_text(*ctx.tokenizer, ids.front())});
    }
  }
  return start_generation(ctx, CompletionKind::kText, std::move(prompts), r.options, {}, {}, std::move(echoes));
}

HttpResponse ApiServer::start_generation(const ServingContext& ctx, CompletionKind kind,
                                         std::vector<std::vector<int32_t>> prompts, const GenerationOptions& options,
                                         std::vector<int32_t> extra_stop_ids, const AnswerMarkup& markup,
                                         std::vector<Echo> echoes) {
  const char* param = kind == CompletionKind::kChat ? "messages" : "prompt";
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string where = prompts.size() > 1 ? fmt::format(" {}", i) : std::string();
    if (prompts[i].empty()) {
      throw bad_request(fmt::format("the prompt{} is empty after tokenization", where), param, "invalid_value");
    }
    const int64_t tokens = static_cast<int64_t>(prompts[i].size());
    if (tokens >= ctx.session_len) {
      throw bad_request(fmt::format("the prompt{} has {} tokens, but this server's session length is {} tokens "
                                    "(prompt and completion together; see --session-len): shorten the prompt",
                                    where, tokens, ctx.session_len),
                        param, "context_length_exceeded");
    }
    prompt_tokens += tokens;
  }
  if (options_.max_concurrent_requests > 0 && in_flight_.load() >= options_.max_concurrent_requests) {
    throw ApiError(429, fmt::format("the server is busy: {} requests in flight (--max-concurrent-requests)",
                                    options_.max_concurrent_requests),
                   "rate_limit_error", std::nullopt, "too_many_requests");
  }

  // One engine request a choice, n (or best_of candidates) per prompt, each
  // with a seed of its own so that the choices differ (and a seeded request
  // repeats all of them). A
  // Generation owns its engine request from here: should a later submit
  // fail, the ones before are aborted as the vector unwinds.
  std::shared_ptr<const text::GrammarVocabulary> vocabulary;
  std::shared_ptr<text::PatternMaskCache> pattern_masks;  // the choices' shared cache
  if (options.grammar) {
    vocabulary = ctx.grammar_vocabulary->get(*ctx.tokenizer);
    pattern_masks = std::make_shared<text::PatternMaskCache>();
  }
  auto notifier = std::make_shared<Notifier>();
  std::vector<std::unique_ptr<Generation>> generations;
  for (const std::vector<int32_t>& prompt : prompts) {
    engine::RequestId first_choice = 0;  // the others take its computed prompt (Request::shares_prompt_with)
    for (int32_t j = 0; j < options.candidates(); ++j) {
      engine::Request request;
      request.prompt = prompt;
      request.shares_prompt_with = first_choice;
      request.sampling = options.sampling;
      request.sampling.seed += static_cast<uint64_t>(j);
      request.stop_ids = options.stop_token_ids;
      request.stop_ids.insert(request.stop_ids.end(), extra_stop_ids.begin(), extra_stop_ids.end());
      // max_tokens 0 (an echo scoring its prompt): the engine generates one token, which is dropped.
      if (options.max_tokens) request.max_tokens = std::max<int64_t>(1, *options.max_tokens);
      request.min_tokens = options.min_tokens;
      request.ignore_eos = options.ignore_eos;
      request.logprobs = options.logprobs || options.best_of > options.n;  // best_of ranks by them
      request.top_logprobs = options.top_logprobs;
      if (options.echo && options.logprobs) request.prompt_logprobs = options.top_logprobs;
      if (options.grammar) {
        request.constraint = make_json_constraint(options.grammar, vocabulary, options.grammar_tokens, pattern_masks);
      }
      const engine::Clock::time_point arrival = request.arrival;
      std::shared_ptr<engine::RequestStream> stream;
      try {
        stream = ctx.engine->submit(std::move(request), [notifier] { notifier->notify(); });
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kInvalidArgument) throw;
        throw bad_request(e.message(), std::nullopt, "invalid_value");
      }
      if (options.grammar) metrics_.count_structured_choice();
      if (j == 0) first_choice = stream->id();
      generations.push_back(std::make_unique<Generation>(*ctx.engine, *ctx.tokenizer, metrics_, stream, options,
                                                         static_cast<int64_t>(prompt.size()), arrival));
    }
  }

  const std::string route = kind == CompletionKind::kChat ? "/v1/chat/completions" : "/v1/completions";
  CompletionMeta meta;
  meta.kind = kind;
  meta.id = new_id(kind == CompletionKind::kChat ? "chatcmpl" : "cmpl");
  meta.model = options_.model_name;
  meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch()).count();
  meta.stream = options.stream;
  meta.include_usage = options.include_usage;
  meta.logprobs = options.logprobs;
  if (options.best_of > options.n) meta.best_of = {options.best_of, options.n};
  meta.markup = markup;
  ++in_flight_;
  HttpResponse response;
  response.pending = std::make_shared<CompletionResponse>(
      std::move(meta), std::move(generations), prompt_tokens, std::move(echoes), std::move(notifier),
      [this, route](unsigned status) {
        --in_flight_;
        metrics_.count_response(route, status);
      });
  return response;
}

HttpResponse ApiServer::encode(const HttpRequest& request, const ServingContext& ctx) {
  EncodeRequest r = parse_encode_request(request.body);
  Json ids = Json::array();
  Json lengths = Json::array();
  for (const std::string& input : r.inputs) {
    std::string text = input;
    if (r.do_preprocess) {
      text::ChatMessage message;
      message.role = "user";
      message.content = Json(input);
      text = render_chat(ctx, *ctx.chat_template, {message}, /*add_generation_prompt=*/true, std::nullopt);
    }
    std::vector<int32_t> tokens = encode_text(*ctx.tokenizer, text, r.add_bos, "input");
    lengths.push_back(tokens.size());
    ids.push_back(tokens);
  }
  HttpResponse response;
  response.body = dump_json(r.batched ? Json{{"input_ids", ids}, {"length", lengths}}
                                      : Json{{"input_ids", ids[0]}, {"length", lengths[0]}});
  return response;
}

}  // namespace tessera::server
