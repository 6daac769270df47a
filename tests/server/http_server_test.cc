// The HTTP server with a scripted handler, through plain sockets: keep-alive,
// the body limit, malformed requests, chunked SSE written as events arrive,
// and a client that disconnects cancelling its pending response.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "server/http_server.h"

namespace tessera::server {
namespace {

using namespace std::chrono_literals;

// A blocking loopback client with a receive timeout, so a broken server fails the test instead of hanging it.
class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval timeout{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Client() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }
  void send(const std::string& data) { ASSERT_EQ(::send(fd_, data.data(), data.size(), MSG_NOSIGNAL), (ssize_t)data.size()); }
  // Reads until `marker` has arrived (after what was read before), or the peer closes, or 10 s pass.
  std::string read_until(const std::string& marker) {
    while (buffer_.find(marker) == std::string::npos) {
      char chunk[4096];
      ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) break;
      buffer_.append(chunk, n);
    }
    size_t at = buffer_.find(marker);
    size_t end = at == std::string::npos ? buffer_.size() : at + marker.size();
    std::string out = buffer_.substr(0, end);
    buffer_.erase(0, end);
    return out;
  }
  bool closed_by_peer() {
    char c;
    return ::recv(fd_, &c, 1, 0) == 0;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

// Streams `events` SSE events, one per wake, from a thread of its own.
class ScriptedStream : public PendingResponse {
 public:
  ScriptedStream(int events, std::atomic<int>& cancelled) : events_(events), cancelled_(cancelled) {}
  ~ScriptedStream() override {
    if (thread_.joinable()) thread_.join();
  }
  bool streaming() const override { return true; }
  void start(std::function<void()> wake) override {
    thread_ = std::thread([this, wake] {
      for (int i = 0; i < events_ && !stop_; ++i) {
        std::this_thread::sleep_for(20ms);
        ready_ = i + 1;
        wake();
      }
    });
  }
  bool poll(std::string& chunk, HttpResponse&) override {
    for (; sent_ < ready_; ++sent_) chunk += "data: " + std::to_string(sent_) + "\n\n";
    if (sent_ == events_) {
      chunk += "data: [DONE]\n\n";
      return true;
    }
    return false;
  }
  void cancel() noexcept override {
    stop_ = true;
    ++cancelled_;
  }

 private:
  int events_;
  std::atomic<int>& cancelled_;
  std::atomic<int> ready_{0};
  std::atomic<bool> stop_{false};
  int sent_ = 0;
  std::thread thread_;
};

// Never answers; counts its cancellation.
class Forever : public PendingResponse {
 public:
  explicit Forever(std::atomic<int>& cancelled) : cancelled_(cancelled) {}
  bool streaming() const override { return false; }
  void start(std::function<void()>) override {}
  bool poll(std::string&, HttpResponse&) override { return false; }
  void cancel() noexcept override { ++cancelled_; }

 private:
  std::atomic<int>& cancelled_;
};

class serverHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.io_threads = 2;
    options.body_limit = 1024;
    server_ = std::make_unique<HttpServer>(options, [this](const HttpRequest& r) {
      HttpResponse response;
      if (r.path == "/echo") {
        response.body = r.method + " " + r.body + " " + r.header("x-test");
      } else if (r.path == "/stream") {
        response.pending = std::make_shared<ScriptedStream>(5, cancelled_);
      } else if (r.path == "/long-stream") {
        response.pending = std::make_shared<ScriptedStream>(1000000, cancelled_);
      } else if (r.path == "/forever") {
        response.pending = std::make_shared<Forever>(cancelled_);
      } else {
        response.status = 404;
      }
      return response;
    });
    server_->start();
  }
  void TearDown() override { server_->stop(); }

  bool wait_for_cancel(int expected) {
    for (int i = 0; i < 200 && cancelled_ < expected; ++i) std::this_thread::sleep_for(10ms);
    return cancelled_ >= expected;
  }

  std::atomic<int> cancelled_{0};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(serverHttp, KeepAliveServesSeveralRequestsOnOneConnection) {
  Client c(server_->port());
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 3; ++i) {
    std::string body = "hello" + std::to_string(i);
    c.send("POST /echo HTTP/1.1\r\nHost: x\r\nX-Test: yes\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body);
    std::string response = c.read_until("yes");
    EXPECT_NE(response.find("HTTP/1.1 200 OK"), std::string::npos) << response;
    EXPECT_NE(response.find("POST " + body + " yes"), std::string::npos) << response;
  }
}

TEST_F(serverHttp, BodyOverTheLimitIs413WithAnErrorBody) {
  Client c(server_->port());
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'a'));
  std::string response = c.read_until("}}");
  EXPECT_NE(response.find("HTTP/1.1 413"), std::string::npos) << response;
  EXPECT_NE(response.find("\"error\""), std::string::npos) << response;
}

TEST_F(serverHttp, MalformedRequestIs400AndTheServerGoesOn) {
  {
    Client c(server_->port());
    c.send("THIS IS NOT HTTP\r\n\r\n");
    EXPECT_NE(c.read_until("}}").find("HTTP/1.1 400"), std::string::npos);
  }
  Client c(server_->port());
  c.send("GET /echo HTTP/1.1\r\nHost: x\r\nX-Test: again\r\n\r\n");
  EXPECT_NE(c.read_until("again").find("200 OK"), std::string::npos);
}

TEST_F(serverHttp, StreamsChunkedEventsThenKeepsTheConnection) {
  Client c(server_->port());
  c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string response = c.read_until("0\r\n\r\n");
  EXPECT_NE(response.find("Content-Type: text/event-stream"), std::string::npos) << response;
  EXPECT_NE(response.find("Transfer-Encoding: chunked"), std::string::npos) << response;
  size_t last = 0;
  for (int i = 0; i < 5; ++i) {
    size_t at = response.find("data: " + std::to_string(i) + "\n\n");
    ASSERT_NE(at, std::string::npos) << response;
    EXPECT_GT(at, last);  // in order
    last = at;
  }
  EXPECT_NE(response.find("data: [DONE]"), std::string::npos);
  c.send("GET /echo HTTP/1.1\r\nHost: x\r\nX-Test: after\r\n\r\n");
  EXPECT_NE(c.read_until("after").find("200 OK"), std::string::npos);
  EXPECT_EQ(cancelled_, 0);
}

TEST_F(serverHttp, StreamsOneAfterAnotherOnAKeptAliveConnectionAreNotCancelled) {
  Client c(server_->port());
  for (int i = 0; i < 4; ++i) {
    c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string response = c.read_until("0\r\n\r\n");
    EXPECT_NE(response.find("data: [DONE]"), std::string::npos) << i << response;
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(cancelled_, 0);
}

TEST_F(serverHttp, ClientThatLeavesMidStreamCancelsIt) {
  Client c(server_->port());
  c.send("GET /long-stream HTTP/1.1\r\nHost: x\r\n\r\n");
  c.read_until("data: 2\n\n");
  c.close();
  EXPECT_TRUE(wait_for_cancel(1));
}

TEST_F(serverHttp, ClientThatLeavesWhileWaitingCancelsIt) {
  Client c(server_->port());
  c.send("GET /forever HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(cancelled_, 0);
  c.close();
  EXPECT_TRUE(wait_for_cancel(1));
}

TEST_F(serverHttp, StopCancelsWhatIsPendingAndIsIdempotent) {
  Client c(server_->port());
  c.send("GET /forever HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(100ms);
  server_->stop();
  EXPECT_EQ(cancelled_, 1);
  server_->stop();
}

TEST_F(serverHttp, HoldsManyConnectionsAtOnce) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 300; ++i) clients.push_back(std::make_unique<Client>(server_->port()));
  for (auto& c : clients) c->send("GET /echo HTTP/1.1\r\nHost: x\r\nX-Test: many\r\n\r\n");
  int ok = 0;
  for (auto& c : clients) ok += c->read_until("many").find("200 OK") != std::string::npos;
  EXPECT_EQ(ok, 300);
}

}  // namespace
}  // namespace tessera::server
