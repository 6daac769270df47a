// `tessera serve api_server MODEL_PATH [flags]`: the OpenAI-compatible server,
// with LMDeploy's flags and defaults (README.md maps every one of them).
//
// Start-up: listen first (so /health answers 503 while the model loads), load
// the model and plan memory, then report ready with a curl line. SIGTERM or
// SIGINT: new requests get 503, requests in flight finish within the grace
// period, and the process exits 0.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "cli/commands.h"
#include "cli/answer_markup.h"
#include "cli/lmdeploy_flags.h"
#include "cli/serving_model.h"
#include "core/error.h"
#include "core/log.h"
#include "server/api_server.h"
#include "server/http_server.h"
#include "text/reasoning.h"
#include "text/tool_calls.h"

namespace tessera::cli {

namespace {

struct ServeArgs {
  EngineArgs engine;
  std::string server_name = "0.0.0.0";
  int server_port = 23333;
  std::string model_name;
  std::vector<std::string> api_keys;
  std::vector<std::string> allow_origins = {"*"};
  bool allow_credentials = false;
  std::vector<std::string> allow_methods = {"*"};
  std::vector<std::string> allow_headers = {"*"};
  int64_t max_log_len = 0;
  int64_t max_concurrent_requests = 0;
  int io_threads = 4;
  int64_t max_request_bytes = 8 << 20;
  double shutdown_grace_seconds = 30.0;
  int read_timeout_seconds = 60;
  std::string tool_call_parser;  // empty: the format whose markers the vocabulary has
  std::string reasoning_parser;  // empty: none
  bool allow_terminate_by_client = false;
  bool ignored_flag = false;
  LmdeployOnlyFlags lmdeploy;
};

// SIGINT and SIGTERM through a self-pipe: the handler (which may run on any
// thread, OpenBLAS' and OpenMP's included) only writes the signal's number;
// a thread of ours reads it and acts.
class ShutdownSignal {
 public:
  ShutdownSignal() {
    if (pipe2(pipe_, O_CLOEXEC) != 0) throw Error(ErrorKind::kInternal, "cannot create the signal pipe");
    write_end().store(pipe_[1]);
    struct sigaction action {};
    action.sa_handler = [](int signal) {
      const char byte = static_cast<char>(signal);
      [[maybe_unused]] ssize_t n = ::write(write_end().load(), &byte, 1);
    };
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
    thread_ = std::thread([this] {
      char byte = 0;
      while (::read(pipe_[0], &byte, 1) < 0 && errno == EINTR) {
      }
      std::unique_lock lock(mutex_);
      if (closing_) return;
      if (!ready_) {
        // Nothing is in flight before the model is ready: stop at once
        // rather than after a load that may take minutes.
        log_info("{} during start-up: stopping", byte == SIGINT ? "SIGINT" : "SIGTERM");
        std::_Exit(0);
      }
      received_ = byte;
      cv_.notify_all();
    });
  }
  ~ShutdownSignal() {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    const char wake = 0;
    [[maybe_unused]] ssize_t n = ::write(pipe_[1], &wake, 1);  // ends the reader if no signal came
    thread_.join();
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    ::close(pipe_[0]);
    ::close(pipe_[1]);
  }
  void set_ready() {
    std::lock_guard lock(mutex_);
    ready_ = true;
  }
  int wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return received_ != 0; });
    return received_;
  }

 private:
  static std::atomic<int>& write_end() {
    static std::atomic<int> fd{-1};
    return fd;
  }

  int pipe_[2] = {-1, -1};
  struct sigaction old_int_ {}, old_term_ {};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool ready_ = false;
  bool closing_ = false;
  int received_ = 0;
  std::thread thread_;
};

std::string curl_example(const ServeArgs& a, const std::string& host, uint16_t port, const std::string& model) {
  return fmt::format(
      "curl http://{}:{}/v1/chat/completions -H 'Content-Type: application/json'{} "
      "-d '{{\"model\": \"{}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}], \"max_tokens\": 32}}'",
      host, port, a.api_keys.empty() ? "" : " -H 'Authorization: Bearer YOUR_KEY'", model);
}

// A worker node (--node-rank > 0) serves no HTTP: it loads its ranks, meets
// node 0, and runs node 0's steps until node 0 stops (exit 0) or the group
// fails (the error, exit 1).
int run_worker_node(const ServeArgs& a) {
  ShutdownSignal signals;  // SIGINT or SIGTERM: stop at once (nothing is in flight here)
  std::unique_ptr<ServingModel> model = load_serving_model(a.engine);
  log_info("node {} of {}: running node 0's steps", a.engine.node_rank, a.engine.nnodes);
  model->follower->follow();
  log_info("node {} of {}: node 0 stopped the group; stopping", a.engine.node_rank, a.engine.nnodes);
  return 0;
}

int run_serve(const ServeArgs& a) {
  refuse_lmdeploy_only_flags(a.lmdeploy);
  check_supported(a.engine);  // before anything starts, so a refused flag costs no load
  check_answer_markup_options(a.tool_call_parser, a.reasoning_parser);
  if (a.engine.node_rank > 0) return run_worker_node(a);
  ShutdownSignal signals;

  server::ApiOptions api_options;
  api_options.model_name = a.model_name.empty() ? a.engine.model_path : a.model_name;
  api_options.api_keys = a.api_keys;
  api_options.cors = {a.allow_origins, a.allow_credentials, a.allow_methods, a.allow_headers};
  api_options.max_concurrent_requests = a.max_concurrent_requests;
  api_options.max_log_len = static_cast<size_t>(a.max_log_len);
  // GET /terminate takes the SIGTERM path: the signal thread drains and stops.
  if (a.allow_terminate_by_client) api_options.request_shutdown = [] { ::kill(::getpid(), SIGTERM); };
  server::ApiServer api(api_options);

  server::HttpServerOptions http_options;
  http_options.host = a.server_name;
  http_options.port = static_cast<uint16_t>(a.server_port);
  http_options.io_threads = a.io_threads;
  http_options.body_limit = static_cast<size_t>(a.max_request_bytes);
  http_options.read_timeout_seconds = a.read_timeout_seconds;
  server::HttpServer http(http_options, [&api](const server::HttpRequest& r) { return api.handle(r); });
  api.set_connection_counter([&http] { return http.open_connections(); });

  // The model outlives the HTTP server (declared first, destroyed last).
  std::unique_ptr<ServingModel> model;
  struct StopHttp {
    server::HttpServer& http;
    ~StopHttp() { http.stop(); }
  } stop_http{http};

  http.start();
  const std::string host = a.server_name == "0.0.0.0" ? "127.0.0.1" : a.server_name;
  log_info("listening on http://{}:{} (loading the model; /health answers 503 until it is ready)", a.server_name,
           http.port());

  model = load_serving_model(a.engine);
  auto context = std::make_shared<server::ServingContext>();
  context->engine = model->engine.get();
  context->tokenizer = model->tokenizer.get();
  context->chat_template = model->chat_template;
  context->chat_stop_ids = server::find_chat_stop_ids(*model->tokenizer);
  context->session_len = model->plan.session_len;
  set_up_answer_markup(a.tool_call_parser, a.reasoning_parser, *model, *context);
  api.set_ready(context);
  signals.set_ready();
  log_info("ready: serving '{}' on http://{}:{} (chat template {}, session length {}, {})", api_options.model_name,
           a.server_name, http.port(), model->chat_template->name(), context->session_len, model->device.to_string());
  log_info("try: {}", curl_example(a, host, http.port(), api_options.model_name));

  const int signal = signals.wait();
  api.begin_drain();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(a.shutdown_grace_seconds * 1000));
  log_info("{}: not accepting new requests; {} in flight get up to {:.0f} s to finish",
           signal == SIGINT ? "SIGINT" : "SIGTERM", api.in_flight(), a.shutdown_grace_seconds);
  while (api.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (api.in_flight() > 0) log_warning("grace period over: aborting {} requests", api.in_flight());
  http.stop();
  model->engine->stop();
  log_info("stopped");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Runner& runner) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* serve = app.add_subcommand("serve", "Serve a model");
  serve->require_subcommand(1);
  CLI::App* cmd = serve->add_subcommand("api_server", "The OpenAI-compatible HTTP server (LMDeploy's flags)");
  add_engine_options(cmd, a->engine);
  cmd->add_option("--server-name", a->server_name, "address to listen on")->capture_default_str();
  cmd->add_option("--server-port", a->server_port, "port to listen on (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--model-name", a->model_name, "the name clients give as \"model\" (default: MODEL_PATH as given)");
  cmd->add_option("--api-keys", a->api_keys, "accepted Bearer keys for /v1 routes (default: none needed)")
      ->expected(1, -1);
  cmd->add_option("--allow-origins", a->allow_origins, "CORS origins")->capture_default_str()->expected(1, -1);
  cmd->add_flag("--allow-credentials", a->allow_credentials, "CORS: allow credentials");
  cmd->add_option("--allow-methods", a->allow_methods, "CORS methods")->capture_default_str()->expected(1, -1);
  cmd->add_option("--allow-headers", a->allow_headers, "CORS headers")->capture_default_str()->expected(1, -1);
  cmd->add_option("--max-log-len", a->max_log_len, "prompt characters shown in debug logs (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-concurrent-requests", a->max_concurrent_requests,
                  "generation requests at once; more get 429 (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--io-threads", a->io_threads, "HTTP I/O threads")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--max-request-bytes", a->max_request_bytes, "request body limit (larger bodies get 413)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));
  cmd->add_option("--read-timeout-seconds", a->read_timeout_seconds,
                  "a request must arrive within this time once begun (else 408), and an idle connection closes")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--shutdown-grace-seconds", a->shutdown_grace_seconds,
                  "on SIGTERM/SIGINT, how long requests in flight may take to finish")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tool-call-parser", a->tool_call_parser,
                  "the markup tool calls are read from: " + text::tool_call_format_names() +
                      " (default: the one whose tokens the vocabulary has)");
  cmd->add_flag("--allow-terminate-by-client", a->allow_terminate_by_client,
                "GET /terminate shuts the server down as SIGTERM does");
  cmd->add_option("--reasoning-parser", a->reasoning_parser,
                  "split chat answers' thinking into reasoning_content: " + text::reasoning_format_names() +
                      " (default: none)");
  // LMDeploy flags with nothing to do here: metrics are always on, there are no FastAPI docs.
  cmd->add_flag("--enable-metrics,--disable-fastapi-docs", a->ignored_flag, "accepted for LMDeploy compatibility; no effect");
  add_lmdeploy_only_options(cmd, a->lmdeploy);
  cmd->callback([&runner, a] {
    apply_lmdeploy_aliases(a->lmdeploy, a->engine);
    runner = [a] { return run_serve(*a); };
  });
}

}  // namespace tessera::cli
