// HttpServer: HTTP/1.1 on Boost.Asio and Boost.Beast.
//
// Why Asio/Beast: every connection is a few hundred bytes of state driven by
// asynchronous reads and writes, so thousands of idle or streaming clients
// (SSE responses that last as long as a generation) are held by a small, fixed
// pool of I/O threads; a thread-per-connection server would need a thread per
// stream. Beast parses requests (with a body limit) and is header-only.
//
// Threads: `io_threads` threads run the io_context. Each connection runs on a
// strand of its own, so its handlers never run concurrently; the handler
// given to the server runs on those threads and must not block (answers that
// wait for the engine are PendingResponses, http_types.h).
//
// A connection reads a request, answers it, and reads the next while the client
// keeps the connection alive. While a PendingResponse is outstanding, the
// connection watches its socket: a client that closes it gets its response
// cancelled (which aborts the engine request).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/http_types.h"

namespace tessera::server {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 23333;                 // 0: any free port (port() tells which)
  int io_threads = 4;
  size_t body_limit = 8 << 20;           // bytes; a larger body gets 413
  int read_timeout_seconds = 60;         // a request must arrive this fast once begun, and an idle keep-alive ends
};

class HttpServer {
 public:
  // Binds and listens; throws Error(kInvalidArgument) naming --server-name /
  // --server-port when the address cannot be used. Serving starts with start().
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void start();
  // Closes the listener and every connection (pending responses are
  // cancelled) and joins the I/O threads. Idempotent.
  void stop() noexcept;

  uint16_t port() const { return port_; }
  int64_t open_connections() const;

  struct State;  // the io_context, listener and connections (http_server.cc)

 private:
  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  bool stopped_ = false;
};

}  // namespace tessera::server
