#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace tessera::server {

namespace {

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void gauge(std::string& out, const std::string& name, const std::string& help, double value) {
  header(out, name, "gauge", help);
  out += fmt::format("{} {}\n", name, value);
}

void counter(std::string& out, const std::string& name, const std::string& help, double value) {
  header(out, name, "counter", help);
  out += fmt::format("{} {}\n", name, value);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::lock_guard lock(mutex_);
  size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard lock(mutex_);
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, count_);
}

Metrics::Metrics()
    : time_to_first_token({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                           10.0, 20.0, 40.0, 80.0}),
      inter_token_latency({0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                           0.4, 0.5, 0.75, 1.0, 2.5}),
      request_latency({0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                       120.0, 240.0, 480.0}) {}

void Metrics::count_response(const std::string& route, unsigned status) {
  std::lock_guard lock(mutex_);
  ++responses_[{route, status}];
}

void Metrics::count_finish(const std::string& reason) {
  std::lock_guard lock(mutex_);
  ++finishes_[reason];
}

void Metrics::count_structured_choice() {
  std::lock_guard lock(mutex_);
  ++structured_choices_;
}

void Metrics::count_client_disconnect() {
  std::lock_guard lock(mutex_);
  ++disconnects_;
}

void Metrics::add_tokens(int64_t prompt_tokens, int64_t generation_tokens) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt_tokens;
  generation_tokens_ += generation_tokens;
}

std::string Metrics::render(const engine::EngineStats* stats, const ServerGauges& gauges) const {
  std::string out;
  {
    std::lock_guard lock(mutex_);
    header(out, "tessera_http_requests_total", "counter", "HTTP responses by route and status code.");
    for (const auto& [key, n] : responses_) {
      out += fmt::format("tessera_http_requests_total{{route=\"{}\",code=\"{}\"}} {}\n", key.first, key.second, n);
    }
    header(out, "tessera_request_finished_total", "counter",
           "Generation requests by finish reason (abort: the client went away or the server stopped).");
    for (const char* reason : {"stop", "length", "abort", "error"}) {
      auto it = finishes_.find(reason);
      out += fmt::format("tessera_request_finished_total{{reason=\"{}\"}} {}\n", reason,
                         it == finishes_.end() ? 0 : it->second);
    }
    counter(out, "tessera_client_disconnects_total", "Clients that went away before their answer was complete.",
            static_cast<double>(disconnects_));
    counter(out, "tessera_structured_choices_total",
            "Choices generated under a structured output (response_format, guided_*, a forced tool call); each "
            "step works out their allowed tokens on the host.",
            static_cast<double>(structured_choices_));
    counter(out, "tessera_prompt_tokens_total", "Prompt tokens of generation requests.",
            static_cast<double>(prompt_tokens_));
    counter(out, "tessera_generation_tokens_total", "Generated tokens.", static_cast<double>(generation_tokens_));
  }
  time_to_first_token.render(out, "tessera_time_to_first_token_seconds", "Time from arrival to the first token.");
  inter_token_latency.render(out, "tessera_inter_token_latency_seconds", "Time between consecutive tokens.");
  request_latency.render(out, "tessera_e2e_request_latency_seconds", "Time from arrival to the end of a request.");

  gauge(out, "tessera_ready", "1 when the model is loaded and the server accepts requests.", gauges.ready ? 1 : 0);
  gauge(out, "tessera_open_connections", "Open HTTP connections.", static_cast<double>(gauges.open_connections));
  gauge(out, "tessera_requests_in_flight", "HTTP requests waiting for the engine.",
        static_cast<double>(gauges.requests_in_flight));
  if (stats) {
    gauge(out, "tessera_healthy", "1 while the engine is healthy.", stats->healthy ? 1 : 0);
    gauge(out, "tessera_num_requests_running", "Sequences holding KV blocks.", static_cast<double>(stats->running));
    gauge(out, "tessera_num_requests_waiting", "Requests queued for the engine (queue depth).",
          static_cast<double>(stats->waiting));
    gauge(out, "tessera_kv_blocks_total", "KV cache blocks.", static_cast<double>(stats->kv.num_blocks));
    gauge(out, "tessera_kv_blocks_used", "KV cache blocks held by sequences.", static_cast<double>(stats->kv.used_blocks));
    gauge(out, "tessera_kv_blocks_free", "KV cache blocks free (cached ones included).",
          static_cast<double>(stats->kv.free_blocks));
    gauge(out, "tessera_kv_cache_usage_ratio", "Fraction of KV cache blocks in use.",
          stats->kv.num_blocks ? static_cast<double>(stats->kv.used_blocks) / stats->kv.num_blocks : 0.0);
    gauge(out, "tessera_prefix_cache_hit_rate", "Prompt tokens served from the prefix cache, as a fraction.",
          stats->prefix_hit_rate());
    counter(out, "tessera_preemptions_total", "Sequences preempted for lack of KV blocks.",
            static_cast<double>(stats->preemptions));
    gauge(out, "tessera_generation_tokens_per_second", "Generated tokens per second over the last seconds.",
          stats->generated_tokens_per_second);
  }
  return out;
}

}  // namespace tessera::server
