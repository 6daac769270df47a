// Metrics: what /metrics reports, in Prometheus' text format (version 0.0.4).
//
// Counters and histograms are updated from the I/O threads (responses) and
// from pending responses as their tokens arrive; the engine's own numbers (KV
// blocks, queue depth) come from an EngineStats snapshot at render time.
// Every method is thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_stats.h"

namespace tessera::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends the _bucket, _sum and _count lines of `name`.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// What the server adds to the engine's statistics.
struct ServerGauges {
  bool ready = false;
  int64_t open_connections = 0;
  int64_t requests_in_flight = 0;  // HTTP requests waiting for the engine
};

class Metrics {
 public:
  Metrics();

  // One HTTP response, by route ("/v1/chat/completions", ...; "other" for unknown paths) and status.
  void count_response(const std::string& route, unsigned status);
  // One engine request ended: "stop", "length", "abort" (the client went away or the server stopped) or "error".
  void count_finish(const std::string& reason);
  void count_client_disconnect();
  // One choice generated under a structured output's constraint (sampled on the host).
  void count_structured_choice();
  void add_tokens(int64_t prompt_tokens, int64_t generation_tokens);

  Histogram time_to_first_token;  // seconds from arrival to the first token
  Histogram inter_token_latency;  // seconds between consecutive tokens of one request
  Histogram request_latency;      // seconds from arrival to the last event

  // `stats` is null while the model is not loaded.
  std::string render(const engine::EngineStats* stats, const ServerGauges& gauges) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, unsigned>, uint64_t> responses_;
  std::map<std::string, uint64_t> finishes_;
  uint64_t disconnects_ = 0;
  uint64_t structured_choices_ = 0;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
};

}  // namespace tessera::server
