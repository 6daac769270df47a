// SSE framing and the Prometheus text of the metrics.
#include <gtest/gtest.h>

#include "server/metrics.h"
#include "server/sse.h"

namespace tessera::server {
namespace {

TEST(serverSse, OneEventIsOneDataLineAndABlankLine) {
  nlohmann::ordered_json chunk = {{"text", "line one\nline two\r\n\n"}, {"n", 1}};
  std::string event = sse_event(chunk);
  ASSERT_EQ(event.rfind("data: ", 0), 0u);
  ASSERT_GE(event.size(), 2u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  // Newlines inside strings are escaped, so the event has exactly one line of data.
  EXPECT_EQ(std::count(event.begin(), event.end(), '\n'), 2);
  EXPECT_EQ(nlohmann::ordered_json::parse(event.substr(6)), chunk);
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(serverSse, InvalidUtf8IsReplacedNotThrown) {
  std::string event;
  EXPECT_NO_THROW(event = sse_event({{"text", std::string("a\xff" "b")}}));
  EXPECT_NE(event.find("a\xEF\xBF\xBD" "b"), std::string::npos);
}

TEST(serverSse, NonAsciiTextStaysUtf8) {
  EXPECT_EQ(dump_json({{"text", "讲一个三国故事"}}), "{\"text\":\"讲一个三国故事\"}");
}

TEST(serverMetrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(0.7);
  h.observe(5.0);
  std::string out;
  h.render(out, "x_seconds", "help");
  EXPECT_NE(out.find("# TYPE x_seconds histogram"), std::string::npos);
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_count 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_sum 6.25\n"), std::string::npos) << out;
}

TEST(serverMetrics, RenderCountsByStatusReasonAndEngineGauges) {
  Metrics m;
  m.count_response("/v1/completions", 200);
  m.count_response("/v1/completions", 200);
  m.count_response("/v1/completions", 400);
  m.count_finish("stop");
  m.count_finish("abort");
  m.add_tokens(10, 3);
  engine::EngineStats stats;
  stats.waiting = 5;
  stats.running = 2;
  stats.kv.num_blocks = 8;
  stats.kv.used_blocks = 2;
  stats.kv.free_blocks = 6;
  std::string out = m.render(&stats, ServerGauges{true, 3, 1});
  EXPECT_NE(out.find("tessera_http_requests_total{route=\"/v1/completions\",code=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(out.find("tessera_http_requests_total{route=\"/v1/completions\",code=\"400\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("tessera_request_finished_total{reason=\"abort\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("tessera_request_finished_total{reason=\"length\"} 0\n"), std::string::npos);
  EXPECT_NE(out.find("tessera_prompt_tokens_total 10\n"), std::string::npos);
  EXPECT_NE(out.find("tessera_generation_tokens_total 3\n"), std::string::npos);
  EXPECT_NE(out.find("tessera_num_requests_waiting 5\n"), std::string::npos);
  EXPECT_NE(out.find("tessera_kv_cache_usage_ratio 0.25\n"), std::string::npos);
  EXPECT_NE(out.find("tessera_open_connections 3\n"), std::string::npos);
  EXPECT_NE(out.find("tessera_time_to_first_token_seconds_count 0\n"), std::string::npos);
  // Without an engine (still loading): no engine gauges, the rest is there.
  std::string loading = m.render(nullptr, ServerGauges{});
  EXPECT_EQ(loading.find("tessera_kv_blocks_total"), std::string::npos);
  EXPECT_NE(loading.find("tessera_ready 0\n"), std::string::npos);
}

}  // namespace
}  // namespace tessera::server
