// `tessera bench serve`: drives a running server (`tessera serve api_server`)
// with N concurrent streaming clients over M requests whose prompt and output
// lengths are drawn, from a seed, uniformly within ±spread of the given means,
// and reports requests/s, output tokens/s, time to first token (TTFT) and time
// per output token after the first (TPOT, per request: (last − first content
// chunk) ÷ (output tokens − 1)) at p50 and p99. A request whose stream
// finished with tokens but no text (every token decoded to nothing) counts as
// completed, with its tokens, and is left out of TTFT and TPOT.
//
// Clients: one thread each, with a blocking Beast stream. A client's
// timestamps are then taken on its own thread right after its own read
// returns, never behind the parsing of another client's events (as they would
// be on one shared io_context thread), and a few hundred threads that sleep in
// recv() cost nothing that matters next to the server they measure. Requests
// are taken from a shared counter; each request's lengths and prompt depend on
// the seed and its index only, so a run sends the same work whatever the
// scheduling.
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct BenchServeArgs {
  std::string url = "http://127.0.0.1:23333";
  std::string model;  // empty: the first id from GET /v1/models
  std::string api_key;
  int64_t concurrency = 16;
  int64_t requests = 64;
  int64_t prompt_tokens = 256;
  int64_t output_tokens = 128;
  double spread = 0.5;
  uint64_t seed = 0;
  int64_t timeout_seconds = 300;
};

struct Endpoint {
  std::string host, port, prefix;  // prefix: a path before /v1, without the trailing slash
};

Endpoint parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--url {}: only http:// URLs are supported", url),
                "e.g. --url http://127.0.0.1:23333");
  }
  std::string rest = url.substr(scheme.size());
  Endpoint e;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    e.prefix = rest.substr(slash);
    while (!e.prefix.empty() && e.prefix.back() == '/') e.prefix.pop_back();
    rest = rest.substr(0, slash);
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']', colon) == std::string::npos) {
    e.host = rest.substr(0, colon);
    e.port = rest.substr(colon + 1);
  } else {
    e.host = rest;
    e.port = "80";
  }
  if (!e.host.empty() && e.host.front() == '[' && e.host.back() == ']') e.host = e.host.substr(1, e.host.size() - 2);
  if (e.host.empty() || e.port.empty()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--url {}: no host or port", url),
                "e.g. --url http://127.0.0.1:23333");
  }
  return e;
}

// One keep-alive connection of one client thread; reconnects after a close or an error.
class Connection {
 public:
  Connection(const Endpoint& endpoint, std::chrono::seconds timeout) : endpoint_(endpoint), timeout_(timeout) {}

  // Sends a request and hands each piece of the response body to on_body as it
  // arrives; returns the status. Throws beast::system_error on network errors.
  template <typename OnBody>
  unsigned exchange(http::verb verb, const std::string& target, const std::string& api_key, const std::string& body,
                    OnBody&& on_body) {
    if (!stream_) connect();
    http::request<http::string_body> request{verb, endpoint_.prefix + target, 11};
    request.set(http::field::host, endpoint_.host);
    request.set(http::field::user_agent, "tessera-bench");
    if (!api_key.empty()) request.set(http::field::authorization, "Bearer " + api_key);
    if (verb == http::verb::post) {
      request.set(http::field::content_type, "application/json");
      request.body() = body;
    }
    request.keep_alive(true);
    request.prepare_payload();
    try {
      stream_->expires_after(timeout_);
      http::write(*stream_, request);
      http::response_parser<http::buffer_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      stream_->expires_after(timeout_);
      http::read_header(*stream_, buffer_, parser);
      std::array<char, 16384> piece;
      while (!parser.is_done()) {
        parser.get().body().data = piece.data();
        parser.get().body().size = piece.size();
        stream_->expires_after(timeout_);
        beast::error_code ec;
        http::read_some(*stream_, buffer_, parser, ec);  // returns as soon as some of the body is parsed
        if (ec == http::error::need_buffer) ec = {};
        if (ec) throw beast::system_error(ec);
        const size_t n = piece.size() - parser.get().body().size;
        if (n > 0) on_body(std::string_view(piece.data(), n));
      }
      const unsigned status = parser.get().result_int();
      if (!parser.keep_alive()) close();
      return status;
    } catch (...) {
      close();
      throw;
    }
  }

 private:
  void connect() {
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(endpoint_.host, endpoint_.port);
    stream_.emplace(io_);
    stream_->expires_after(timeout_);
    stream_->connect(results);
    stream_->socket().set_option(tcp::no_delay(true));
    buffer_.clear();
  }

  void close() {
    if (stream_) {
      beast::error_code ignored;
      stream_->socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream_.reset();
    }
    buffer_.clear();
  }

  Endpoint endpoint_;
  std::chrono::seconds timeout_;
  asio::io_context io_;
  std::optional<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
};

struct Work {
  int64_t prompt_tokens = 0, output_tokens = 0;
  uint64_t prompt_seed = 0;
};

// The seeded lengths of every request: uniform in [mean·(1 − spread), mean·(1 + spread)], at least 1. The draw
// is done with plain arithmetic on mt19937_64 (not std::uniform_int_distribution) so that every standard
// library gives the same numbers for a seed.
std::vector<Work> make_work(const BenchServeArgs& args) {
  std::mt19937_64 random(args.seed);
  auto draw = [&](int64_t mean) {
    const int64_t lo = std::max<int64_t>(1, std::llround(mean * (1.0 - args.spread)));
    const int64_t hi = std::max<int64_t>(lo, std::llround(mean * (1.0 + args.spread)));
    return lo + static_cast<int64_t>(random() % static_cast<uint64_t>(hi - lo + 1));
  };
  std::vector<Work> work(args.requests);
  for (Work& w : work) {
    w.prompt_tokens = draw(args.prompt_tokens);
    w.output_tokens = draw(args.output_tokens);
    w.prompt_seed = random();
  }
  return work;
}

// Token ids 3..258: after <unk>, <s>, </s> in a SentencePiece vocabulary these are the 256 byte pieces, and
// every vocabulary tessera serves has at least that many ids, so the prompt is valid and of exactly the drawn
// length whatever the tokenizer.
Json prompt_ids(const Work& w) {
  std::mt19937_64 random(w.prompt_seed);
  Json ids = Json::array();
  for (int64_t i = 0; i < w.prompt_tokens; ++i) ids.push_back(3 + static_cast<int>(random() % 256));
  return ids;
}

struct Result {
  bool ok = false;
  std::string error;
  int64_t output_tokens = 0;
  // Seconds from sending to the first content chunk; -1 when no chunk carried
  // text (every token decoded to nothing, e.g. ids past the tokenizer's or
  // special tokens): the request completed, but has no first-token time.
  double ttft = -1;
  double tpot = -1;  // seconds per output token after the first; -1 when there was one token
  Clock::time_point end;
};

Result run_one(Connection& connection, const BenchServeArgs& args, const std::string& model, const Work& w) {
  Result r;
  const Json body = {{"model", model},
                     {"prompt", prompt_ids(w)},
                     {"max_tokens", w.output_tokens},
                     {"ignore_eos", true},
                     {"temperature", 0},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  std::string pending, error_body;
  std::optional<Clock::time_point> first, last;
  bool done = false;
  int64_t usage_tokens = -1;
  auto on_event = [&](const std::string& data, Clock::time_point now) {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    const Json event = Json::parse(data, nullptr, false);
    if (event.is_discarded()) throw Error(ErrorKind::kInvalidArgument, "an SSE event is not JSON: " + data);
    if (event.contains("error")) throw Error(ErrorKind::kInvalidArgument, "the stream ended in an error: " + data);
    if (event.contains("usage") && event["usage"].is_object()) {
      usage_tokens = event["usage"].value("completion_tokens", int64_t{-1});
    }
    const Json& choices = event.value("choices", Json::array());
    if (!choices.empty() && choices[0].value("finish_reason", Json()).is_null()) {
      if (!first) first = now;
      last = now;
    }
  };
  const Clock::time_point start = Clock::now();
  try {
    const unsigned status =
        connection.exchange(http::verb::post, "/v1/completions", args.api_key, body.dump(), [&](std::string_view piece) {
          const Clock::time_point now = Clock::now();
          if (!error_body.empty() || pending.size() > (1 << 20)) {
            error_body.append(piece);  // not an event stream (an error answer): kept for the message
            return;
          }
          pending.append(piece);
          size_t end;
          while ((end = pending.find("\n\n")) != std::string::npos) {
            const std::string event = pending.substr(0, end);
            pending.erase(0, end + 2);
            if (event.rfind("data: ", 0) == 0) {
              on_event(event.substr(6), now);
            } else if (!event.empty() && event.front() == '{') {
              error_body = event;
            }
          }
        });
    r.end = Clock::now();
    if (status != 200) {
      r.error = fmt::format("HTTP {}: {}", status, error_body.empty() ? pending : error_body);
      return r;
    }
  } catch (const Error& e) {
    r.error = e.message();
    return r;
  } catch (const std::exception& e) {
    r.error = e.what();
    return r;
  }
  if (!done) r.error = "the stream ended without data: [DONE]";
  else if (usage_tokens < 0) r.error = "the stream had no usage (stream_options.include_usage)";
  if (!r.error.empty()) return r;
  r.ok = true;
  r.output_tokens = usage_tokens;
  if (!first) return r;
  r.ttft = std::chrono::duration<double>(*first - start).count();
  if (usage_tokens > 1) r.tpot = std::chrono::duration<double>(*last - *first).count() / (usage_tokens - 1);
  return r;
}

// Nearest-rank percentile of unsorted values; 0 for none.
double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

std::string unreachable_hint() {
  return "start a server first, e.g. `tessera serve api_server MODEL_DIR`, or pass --url of a running one";
}

// GET /v1/models: checks that the server answers and returns the first model id.
std::string first_model(const Endpoint& endpoint, const BenchServeArgs& args) {
  Connection connection(endpoint, std::chrono::seconds(std::min<int64_t>(args.timeout_seconds, 30)));
  std::string body;
  unsigned status = 0;
  try {
    status = connection.exchange(http::verb::get, "/v1/models", args.api_key, "",
                                 [&](std::string_view piece) { body.append(piece); });
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot reach the server at {}: {}", args.url, e.what()),
                unreachable_hint());
  }
  if (status == 401) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} refused the API key (HTTP 401)", args.url),
                "pass one of the server's --api-keys with --api-key");
  }
  const Json models = Json::parse(body, nullptr, false);
  if (status != 200 || models.is_discarded() || !models.contains("data") || !models["data"].is_array() ||
      models["data"].empty() || !models["data"][0].contains("id")) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}/v1/models did not list a model (HTTP {}): {}", args.url, status, body.substr(0, 200)),
                "is this a tessera (or OpenAI-compatible) server? Name the model with --model");
  }
  return models["data"][0]["id"].get<std::string>();
}

int run_bench_serve(const BenchServeArgs& args) {
  const Endpoint endpoint = parse_url(args.url);
  const std::string listed = first_model(endpoint, args);  // also the reachability check
  const std::string model = args.model.empty() ? listed : args.model;
  const std::vector<Work> work = make_work(args);
  int64_t planned_prompt = 0, planned_output = 0;
  for (const Work& w : work) {
    planned_prompt += w.prompt_tokens;
    planned_output += w.output_tokens;
  }
  const int64_t clients = std::min(args.concurrency, args.requests);
  fmt::print("server          {} (model {})\n", args.url, model);
  fmt::print("workload        {} requests, {} clients, seed {}; prompt {} ± {:.0f}% tokens, output {} ± {:.0f}% "
             "(planned: {} prompt, {} output tokens)\n",
             args.requests, clients, args.seed, args.prompt_tokens, args.spread * 100, args.output_tokens,
             args.spread * 100, planned_prompt, planned_output);
  std::fflush(stdout);

  std::vector<Result> results(work.size());
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (int64_t c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      Connection connection(endpoint, std::chrono::seconds(args.timeout_seconds));
      for (size_t i = next++; i < work.size(); i = next++) results[i] = run_one(connection, args, model, work[i]);
    });
  }
  for (std::thread& t : threads) t.join();
  Clock::time_point end = start;
  int64_t failures = 0, output_tokens = 0, textless = 0;
  std::vector<double> ttft, tpot;
  std::string first_error;
  for (const Result& r : results) {
    if (!r.ok) {
      if (failures++ == 0) first_error = r.error;
      continue;
    }
    end = std::max(end, r.end);
    output_tokens += r.output_tokens;
    if (r.ttft < 0) {
      ++textless;
      continue;
    }
    ttft.push_back(r.ttft * 1e3);
    if (r.tpot >= 0) tpot.push_back(r.tpot * 1e3);
  }
  const double wall = std::chrono::duration<double>(std::max(end, start) - start).count();
  const int64_t completed = args.requests - failures;
  fmt::print("requests        {}\n", args.requests);
  fmt::print("failures        {}\n", failures);
  fmt::print("wall time       {:.3f} s\n", wall);
  fmt::print("requests/s      {:.2f}\n", wall > 0 ? completed / wall : 0.0);
  fmt::print("output tokens   {}\n", output_tokens);
  fmt::print("output tokens/s {:.1f}\n", wall > 0 ? output_tokens / wall : 0.0);
  fmt::print("TTFT            p50 {:.2f} ms, p99 {:.2f} ms\n", percentile(ttft, 50), percentile(ttft, 99));
  fmt::print("TPOT            p50 {:.3f} ms, p99 {:.3f} ms\n", percentile(tpot, 50), percentile(tpot, 99));
  if (textless > 0) {
    fmt::print("without text    {}\n", textless);
    log_warning("{} of {} requests finished with tokens but sent no text (their tokens decode to nothing): counted "
                "in the tokens, left out of TTFT and TPOT",
                textless, completed);
  }
  if (failures > 0) {
    log_error("{} of {} requests failed; the first: {}", failures, args.requests, first_error);
    return 1;
  }
  return 0;
}

}  // namespace

void add_bench_serve_command(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<BenchServeArgs>();
  CLI::App* bench = app.get_subcommand("bench");
  CLI::App* cmd = bench->add_subcommand("serve", "Many streaming clients against a running server: requests/s, tokens/s, TTFT, TPOT");
  cmd->add_option("--url", args->url, "the server (tessera serve api_server)")->capture_default_str();
  cmd->add_option("--model", args->model, "model name to request (default: the first from GET /v1/models)");
  cmd->add_option("--api-key", args->api_key, "sent as Authorization: Bearer");
  cmd->add_option("--concurrency", args->concurrency, "clients sending at once")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--requests", args->requests, "requests in all")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--prompt-tokens", args->prompt_tokens, "mean prompt length")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--output-tokens", args->output_tokens, "mean output length (max_tokens, ignore_eos)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--spread", args->spread, "lengths are uniform within ± this fraction of the mean")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", args->seed, "seed of the lengths and prompts")->capture_default_str();
  cmd->add_option("--timeout", args->timeout_seconds, "seconds a client waits for the server on any one read or write")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([&runner, args] { runner = [args] { return run_bench_serve(*args); }; });
}

}  // namespace tessera::cli
