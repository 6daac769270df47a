#include "server/api_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"
#include "server/sse.h"

namespace tessera::server {

namespace {

using Json = nlohmann::ordered_json;

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool contains(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

std::string join(const std::vector<std::string>& list) {
  std::string out;
  for (const auto& s : list) out += (out.empty() ? "" : ", ") + s;
  return out;
}

HttpResponse json_response(const Json& body, unsigned status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status();
  r.body = e.body();
  return r;
}

struct Route {
  const char* path;
  const char* method;
};
constexpr Route kRoutes[] = {{"/health", "GET"},          {"/metrics", "GET"},
                             {"/v1/models", "GET"},       {"/v1/chat/completions", "POST"},
                             {"/v1/completions", "POST"}, {"/v1/encode", "POST"},
                             {"/terminate", "GET"}};

// POST bodies are JSON: a body declared as something else (a form, text) gets 415, as a
// FastAPI server answers it with an error rather than guessing. No Content-Type at all is read as JSON.
void check_content_type(const HttpRequest& request) {
  const std::string& value = request.header("content-type");
  if (value.empty() && request.headers.find("content-type") == request.headers.end()) return;
  std::string type = value.substr(0, value.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.erase(type.begin());
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool json = type == "application/json" ||
                    (type.starts_with("application/") && type.size() > 17 && type.ends_with("+json"));
  if (!json) {
    throw ApiError(415, fmt::format("the body must be JSON sent as 'Content-Type: application/json', not '{}'", value),
                   "invalid_request_error", std::nullopt, "unsupported_media_type");
  }
}

}  // namespace

std::vector<int32_t> find_chat_stop_ids(const text::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (const char* piece : {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"}) {
    std::optional<int32_t> id = tokenizer.piece_to_id(piece);
    if (id && tokenizer.is_special(*id)) ids.push_back(*id);
  }
  return ids;
}

ApiServer::ApiServer(ApiOptions options) : options_(std::move(options)), started_(unix_seconds()) {}

void ApiServer::set_ready(std::shared_ptr<const ServingContext> context) {
  std::lock_guard lock(mutex_);
  context_ = std::move(context);
}

std::shared_ptr<const ServingContext> ApiServer::context() const {
  std::lock_guard lock(mutex_);
  return context_;
}

void ApiServer::begin_drain() { draining_ = true; }

HttpResponse ApiServer::handle(const HttpRequest& request) {
  std::string route = "other";
  for (const Route& r : kRoutes) {
    if (request.path == r.path) route = r.path;
  }
  HttpResponse response;
  try {
    if (request.method == "OPTIONS") {
      response = preflight(request);
    } else {
      response = this->route(request, route);
    }
  } catch (const ApiError& e) {
    response = error_response(e);
  } catch (const Error& e) {
    const bool client = e.kind() == ErrorKind::kInvalidArgument || e.kind() == ErrorKind::kUnsupported;
    response = error_response(ApiError(client ? 400 : 500, e.message(), client ? "invalid_request_error" : "internal_error"));
  } catch (const std::exception& e) {
    response = error_response(ApiError(500, std::string("internal error: ") + e.what(), "internal_error"));
  }
  add_cors_headers(request, response);
  if (!response.pending) {
    metrics_.count_response(route, response.status);
    if (response.status >= 400 && route != "/health") {  // a load balancer's probes are not news
      log_info("{} {} from {}: {} {}", request.method, request.path, request.remote, response.status, response.body);
    }
  }
  return response;
}

HttpResponse ApiServer::route(const HttpRequest& request, const std::string& route) {
  if (route == "other") {
    throw ApiError(404, fmt::format("no route for {} {}", request.method, request.path), "not_found_error");
  }
  for (const Route& r : kRoutes) {
    if (route == r.path && request.method != r.method && !(request.method == "HEAD" && std::string(r.method) == "GET")) {
      ApiError e(405, fmt::format("{} takes {}, not {}", route, r.method, request.method), "invalid_request_error");
      HttpResponse response = error_response(e);
      response.headers.emplace_back("Allow", r.method);
      return response;
    }
  }
  if (route == "/health") return health();
  if (route == "/metrics") return render_metrics();
  if (!options_.api_keys.empty() && !authorized(request)) {
    throw ApiError(401, "invalid or missing API key: send 'Authorization: Bearer KEY' with one of the server's keys",
                   "invalid_request_error", std::nullopt, "invalid_api_key");
  }
  if (route == "/v1/models") return models();
  if (route == "/terminate") return shutdown_by_client();
  if (draining_) throw ApiError(503, "the server is shutting down", "service_unavailable");
  std::shared_ptr<const ServingContext> ctx = context();
  if (!ctx) throw ApiError(503, "the model is still loading; retry when /health says ready", "service_unavailable");
  if (!ctx->engine->healthy()) {
    throw ApiError(503, "the engine is unhealthy after a device failure; the server must be restarted",
                   "service_unavailable");
  }
  check_content_type(request);
  if (route == "/v1/chat/completions") return chat_completions(request, *ctx);
  if (route == "/v1/completions") return completions(request, *ctx);
  return encode(request, *ctx);
}

// LMDeploy's GET /terminate: with --allow-terminate-by-client, the server
// shuts down as on SIGTERM (requests in flight finish); otherwise 400.
HttpResponse ApiServer::shutdown_by_client() {
  if (!options_.request_shutdown) {
    throw ApiError(400, "this server cannot be terminated by a client: start it with --allow-terminate-by-client",
                   "invalid_request_error");
  }
  log_info("GET /terminate: shutting down as on SIGTERM");
  options_.request_shutdown();
  return HttpResponse{};
}

HttpResponse ApiServer::health() const {
  std::shared_ptr<const ServingContext> ctx = context();
  if (!ctx) throw ApiError(503, "the model is still loading", "service_unavailable");
  if (draining_) throw ApiError(503, "the server is shutting down", "service_unavailable");
  if (!ctx->engine->healthy()) throw ApiError(503, "the engine is unhealthy after a device failure", "service_unavailable");
  HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  return r;
}

HttpResponse ApiServer::render_metrics() const {
  std::shared_ptr<const ServingContext> ctx = context();
  std::optional<engine::EngineStats> stats;
  if (ctx) stats = ctx->engine->stats();
  ServerGauges gauges;
  gauges.ready = ctx && !draining_;
  gauges.open_connections = connection_counter_ ? connection_counter_() : 0;
  gauges.requests_in_flight = in_flight_.load();
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.render(stats ? &*stats : nullptr, gauges);
  return r;
}

HttpResponse ApiServer::models() const {
  std::shared_ptr<const ServingContext> ctx = context();
  Json model = {{"id", options_.model_name}, {"object", "model"},      {"created", started_},
                {"owned_by", "tessera"},     {"root", options_.model_name}, {"parent", nullptr}};
  if (ctx) model["max_model_len"] = ctx->session_len;
  return json_response({{"object", "list"}, {"data", Json::array({model})}});
}

bool ApiServer::authorized(const HttpRequest& request) const {
  const std::string& header = request.header("authorization");
  const std::string prefix = "Bearer ";
  if (header.size() <= prefix.size() || header.compare(0, prefix.size(), prefix) != 0) return false;
  return contains(options_.api_keys, header.substr(prefix.size()));
}

void ApiServer::add_cors_headers(const HttpRequest& request, HttpResponse& response) const {
  const CorsOptions& cors = options_.cors;
  const std::string& origin = request.header("origin");
  if (origin.empty() || cors.allow_origins.empty()) return;
  const bool any = contains(cors.allow_origins, "*");
  if (!any && !contains(cors.allow_origins, origin)) return;
  if (any && !cors.allow_credentials) {
    response.headers.emplace_back("Access-Control-Allow-Origin", "*");
  } else {
    response.headers.emplace_back("Access-Control-Allow-Origin", origin);
    response.headers.emplace_back("Vary", "Origin");
  }
  if (cors.allow_credentials) response.headers.emplace_back("Access-Control-Allow-Credentials", "true");
}

HttpResponse ApiServer::preflight(const HttpRequest& request) const {
  const CorsOptions& cors = options_.cors;
  const std::string& origin = request.header("origin");
  HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  if (origin.empty() || request.header("access-control-request-method").empty()) {
    r.headers.emplace_back("Allow", "GET, POST, OPTIONS");
    return r;
  }
  if (cors.allow_origins.empty() || !(contains(cors.allow_origins, "*") || contains(cors.allow_origins, origin))) {
    throw ApiError(400, "disallowed CORS origin " + origin);
  }
  r.headers.emplace_back("Access-Control-Allow-Methods", contains(cors.allow_methods, "*")
                                                             ? "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
                                                             : join(cors.allow_methods));
  const std::string& requested = request.header("access-control-request-headers");
  if (contains(cors.allow_headers, "*")) {
    if (!requested.empty()) r.headers.emplace_back("Access-Control-Allow-Headers", requested);
  } else {
    r.headers.emplace_back("Access-Control-Allow-Headers", join(cors.allow_headers));
  }
  r.headers.emplace_back("Access-Control-Max-Age", "600");
  return r;
}

}  // namespace tessera::server
