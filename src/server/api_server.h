// ApiServer: the OpenAI-compatible routes over one Engine.
//
//   GET  /health               200 when ready; 503 while loading, draining or unhealthy
//   GET  /metrics              Prometheus text (metrics.h)
//   GET  /v1/models            the one served model
//   POST /v1/chat/completions  chat template → tokens → engine; JSON or SSE
//   POST /v1/completions       prompt text or ids → engine; JSON or SSE
//   POST /v1/encode            LMDeploy's tokenizer endpoint
//   GET  /terminate            LMDeploy's: shut down as on SIGTERM (with --allow-terminate-by-client)
// With API keys configured, every /v1 route needs "Authorization: Bearer KEY".
// CORS headers follow the configured origins, methods and headers.
//
// handle() runs on the HTTP server's I/O threads and never blocks: parsing,
// templating and tokenizing happen there, then the engine request is
// submitted and a CompletionResponse waits for its tokens. The serving
// context (engine, tokenizer, template) is published once the model is
// loaded; until then the routes answer 503.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/completion_response.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/openai_schema.h"
#include "server/structured_output.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace tessera::server {

struct CorsOptions {
  std::vector<std::string> allow_origins = {"*"};
  bool allow_credentials = false;
  std::vector<std::string> allow_methods = {"*"};
  std::vector<std::string> allow_headers = {"*"};
};

struct ApiOptions {
  std::string model_name;                // what clients put in "model"
  std::vector<std::string> api_keys;     // empty: no authentication
  CorsOptions cors;
  int64_t max_concurrent_requests = 0;   // generation requests at once; 0: no limit (beyond that: 429)
  size_t max_log_len = 0;                // prompt characters in debug logs; 0: all
  // GET /terminate calls this (--allow-terminate-by-client: it starts the
  // graceful shutdown SIGTERM starts); unset: the route answers 400.
  std::function<void()> request_shutdown;
};

// What the routes need once the model is loaded. The references must outlive
// the ApiServer's use of them (the engine is stopped after the HTTP server).
struct ServingContext {
  engine::Engine* engine = nullptr;
  const text::Tokenizer* tokenizer = nullptr;
  std::optional<text::ChatTemplate> chat_template;
  std::vector<int32_t> chat_stop_ids;    // end-of-turn tokens (<|im_end|>, <|eot_id|>, ...) in the vocabulary
  int64_t session_len = 0;
  // Requests with tools: the markup their answers' calls are read from
  // (none: answers stay text), the template that renders them (none: such
  // requests are refused, the chat template would drop the tools), and the
  // tokens that end a call (InternLM2's <|action_end|>).
  std::optional<text::ToolCallFormat> tool_call_format;
  std::optional<text::ChatTemplate> tools_template;
  std::vector<int32_t> tool_stop_ids;
  bool tool_keeps_special = false;  // the markers are special tokens: such answers keep special tokens
  // --reasoning-parser: chat answers' thinking goes to reasoning_content;
  // keep_special: its tags are special tokens, so the text keeps them.
  std::optional<text::ReasoningFormat> reasoning_format;
  bool reasoning_keeps_special = false;
  // Structured output's index of the tokenizer, made at the first such request.
  std::shared_ptr<GrammarVocabularyCache> grammar_vocabulary = std::make_shared<GrammarVocabularyCache>();
};

class ApiServer {
 public:
  explicit ApiServer(ApiOptions options);

  HttpResponse handle(const HttpRequest& request);

  void set_ready(std::shared_ptr<const ServingContext> context);
  // New requests get 503 from now on; those in flight go on.
  void begin_drain();
  int64_t in_flight() const { return in_flight_.load(); }
  void set_connection_counter(std::function<int64_t()> count) { connection_counter_ = std::move(count); }
  Metrics& metrics() { return metrics_; }

 private:
  HttpResponse route(const HttpRequest& request, const std::string& route);
  HttpResponse health() const;
  HttpResponse shutdown_by_client();
  HttpResponse models() const;
  HttpResponse render_metrics() const;
  HttpResponse chat_completions(const HttpRequest& request, const ServingContext& context);
  HttpResponse completions(const HttpRequest& request, const ServingContext& context);
  HttpResponse encode(const HttpRequest& request, const ServingContext& context);
  HttpResponse preflight(const HttpRequest& request) const;
  void add_cors_headers(const HttpRequest& request, HttpResponse& response) const;
  bool authorized(const HttpRequest& request) const;
  std::shared_ptr<const ServingContext> context() const;
  // Submits and wraps the engine requests, `options.n` for each prompt (common
  // to both completion routes); `markup`: what of a chat answer becomes
  // reasoning_content and tool_calls; `echoes`: one per prompt, or none.
  HttpResponse start_generation(const ServingContext& context, CompletionKind kind,
                                std::vector<std::vector<int32_t>> prompts,
                                const GenerationOptions& options, std::vector<int32_t> extra_stop_ids,
                                const AnswerMarkup& markup = {}, std::vector<Echo> echoes = {});

  ApiOptions options_;
  Metrics metrics_;
  mutable std::mutex mutex_;
  std::shared_ptr<const ServingContext> context_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};
  std::function<int64_t()> connection_counter_;
  const int64_t started_;  // unix seconds, the models' "created"
};

// The end-of-turn tokens of common chat formats that `tokenizer` has as special tokens.
std::vector<int32_t> find_chat_stop_ids(const text::Tokenizer& tokenizer);

}  // namespace tessera::server
