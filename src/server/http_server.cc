#include "server/http_server.h"

#include <sys/resource.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <array>
#include <memory>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"

namespace tessera::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

const std::string& HttpRequest::header(const std::string& name) const {
  static const std::string empty;
  auto it = headers.find(name);
  return it == headers.end() ? empty : it->second;
}

namespace {

class Connection;

// Wakes a connection from another thread (the engine's); cleared when the
// connection no longer waits, so a late wake posts nothing.
class Waker {
 public:
  void set(std::function<void()> fn) {
    std::lock_guard lock(mutex_);
    fn_ = std::move(fn);
  }
  void clear() { set({}); }
  void operator()() {
    std::lock_guard lock(mutex_);
    if (fn_) fn_();
  }

 private:
  std::mutex mutex_;
  std::function<void()> fn_;
};

}  // namespace

struct HttpServer::State {
  HttpServerOptions options;
  HttpHandler handler;
  std::atomic<int64_t> connections{0};
  std::mutex registry_mutex;
  std::vector<std::weak_ptr<Connection>> registry;  // for stop(); pruned on accept
  // Destroyed first (members go in reverse order), with every handler and so every connection.
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer retry{ioc};
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::State& state)
      : stream_(std::move(socket)), state_(state), read_timer_(stream_.get_executor()) {
    ++state_.connections;
    beast::error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);  // SSE events go out as they are made
    remote_ = stream_.socket().remote_endpoint(ec).address().to_string();
  }
  ~Connection() {
    drop_pending(true);
    --state_.connections;
  }

  void run() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
  }

  // After the I/O threads are joined: cancel what is pending, close the socket.
  void shutdown_now() noexcept {
    drop_pending(true);
    close();
  }

 private:
  void read_request() {
    parser_.emplace();
    parser_->body_limit(state_.options.body_limit);
    parser_->header_limit(64 * 1024);
    // The deadline is a timer of its own rather than the stream's expiry, which would close the socket: a
    // request that has begun but not arrived in time still gets its 408.
    timed_out_ = false;
    read_timer_.expires_after(std::chrono::seconds(state_.options.read_timeout_seconds));
    read_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;  // cancelled: the request arrived
      self->timed_out_ = true;
      beast::error_code cancel_error;
      self->stream_.socket().cancel(cancel_error);
    });
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Connection::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, size_t) {
    read_timer_.cancel();
    const bool begun = parser_->got_some() || buffer_.size() > 0;
    if (timed_out_ && ec && begun) {
      keep_alive_ = false;
      return write_response(error_response(
          408, fmt::format("the request did not arrive within {} seconds", state_.options.read_timeout_seconds)));
    }
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == asio::error::eof || ec == asio::error::connection_reset || (timed_out_ && ec)) {
      return close();
    }
    keep_alive_ = false;
    if (ec == http::error::body_limit) {
      return write_response(error_response(
          413, fmt::format("the request body is larger than the limit of {} bytes", state_.options.body_limit)));
    }
    if (ec) return write_response(error_response(400, "malformed HTTP request: " + ec.message()));

    http::request<http::string_body> message = parser_->release();
    keep_alive_ = message.keep_alive();
    HttpRequest request;
    request.method = std::string(message.method_string());
    std::string target(message.target());
    size_t question = target.find('?');
    request.path = target.substr(0, question);
    if (question != std::string::npos) request.query = target.substr(question + 1);
    for (const auto& field : message) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      request.headers[name] = std::string(field.value());
    }
    request.body = std::move(message.body());
    request.remote = remote_;

    HttpResponse response;
    try {
      response = state_.handler(request);
    } catch (const std::exception& e) {
      log_error("{} {}: {}", request.method, request.path, e.what());
      response = error_response(500, "internal error: " + std::string(e.what()));
    }
    stream_.expires_never();
    if (response.pending) return begin_pending(std::move(response));
    write_response(std::move(response));
  }

  static HttpResponse error_response(unsigned status, const std::string& message) {
    HttpResponse r;
    r.status = status;
    r.body = error_body(status, message);
    return r;
  }

  void write_response(HttpResponse response) {
    auto message = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(response.status), 11);
    message->set(http::field::server, "tessera");
    message->set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) message->set(name, value);
    message->body() = std::move(response.body);
    message->keep_alive(keep_alive_);
    message->prepare_payload();
    http::async_write(stream_, *message, [self = shared_from_this(), message](beast::error_code ec, size_t) {
      if (ec) return self->close();
      if (!self->keep_alive_) return self->close_gracefully();
      self->read_request();
    });
  }

  // Ends the connection after an answer while the client may still be sending (a body over the limit, a
  // malformed request): closing with unread bytes would reset the connection and could destroy the answer
  // before the client reads it. So: stop sending, read and drop what comes for a short while, then close.
  void close_gracefully() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    stream_.expires_after(std::chrono::seconds(2));
    drain_ = std::make_unique<std::array<char, 16384>>();
    drain();
  }

  void drain() {
    stream_.async_read_some(asio::buffer(*drain_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) {
        self->drain_.reset();
        return self->close();
      }
      self->drain();
    });
  }

  void begin_pending(HttpResponse response) {
    pending_ = std::move(response.pending);
    streaming_ = pending_->streaming();
    if (streaming_) {
      head_ = "HTTP/1.1 200 OK\r\nServer: tessera\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
              "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n";
      for (const auto& [name, value] : response.headers) head_ += name + ": " + value + "\r\n";
      head_ += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    }
    waker_ = std::make_shared<Waker>();
    waker_->set([weak = weak_from_this(), executor = stream_.get_executor()] {
      asio::post(executor, [weak] {
        if (auto self = weak.lock()) self->pump();
      });
    });
    try {
      pending_->start([waker = waker_] { (*waker)(); });
    } catch (const std::exception& e) {
      drop_pending(true);
      return write_response(error_response(500, "internal error: " + std::string(e.what())));
    }
    watch_disconnect();
    pump();
  }

  // Polls the pending response and writes what it gave; runs on the strand.
  void pump() {
    if (!pending_ || writing_) return;
    std::string chunk;
    HttpResponse final_response;
    bool done;
    try {
      done = pending_->poll(chunk, final_response);
    } catch (const std::exception& e) {
      log_error("a pending response failed: {}", e.what());
      done = true;
      final_response = error_response(500, "internal error: " + std::string(e.what()));
    }
    if (!streaming_) {
      if (!done) return;
      drop_pending(false);
      return write_response(std::move(final_response));
    }
    std::string frame = std::move(head_);
    head_.clear();
    if (!chunk.empty()) frame += fmt::format("{:x}\r\n", chunk.size()) + chunk + "\r\n";
    if (done) {
      frame += "0\r\n\r\n";
      drop_pending(false);
    }
    if (frame.empty()) return;
    writing_ = true;
    out_ = std::move(frame);
    asio::async_write(stream_, asio::buffer(out_), [self = shared_from_this(), done](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) {
        self->drop_pending(true);  // the client is gone: abort its request
        return self->close();
      }
      if (!done) return self->pump();
      if (self->keep_alive_) return self->read_request();
      self->close();
    });
  }

  // Notices a client that closes its connection while it waits for an answer.
  void watch_disconnect() {
    if (watching_) return;
    watching_ = true;
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      self->watching_ = false;
      if (ec || !self->pending_) return;
      char byte;
      beast::error_code mode_error, peek_error;
      self->stream_.socket().non_blocking(true, mode_error);
      size_t n = self->stream_.socket().receive(asio::buffer(&byte, 1), tcp::socket::message_peek, peek_error);
      self->stream_.socket().non_blocking(false, mode_error);
      if (peek_error == asio::error::would_block) return self->watch_disconnect();
      if (peek_error || n == 0) {
        log_debug("client {} went away before its answer was complete", self->remote_);
        self->drop_pending(true);
        return self->close();
      }
      // Bytes of a next (pipelined) request: read after this answer.
    });
  }

  void drop_pending(bool cancel) noexcept {
    if (waker_) waker_->clear();
    waker_.reset();
    if (pending_ && cancel) pending_->cancel();
    pending_.reset();
  }

  void close() noexcept {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  HttpServer::State& state_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string remote_;
  bool keep_alive_ = false;

  std::shared_ptr<PendingResponse> pending_;
  std::shared_ptr<Waker> waker_;
  bool streaming_ = false;
  bool writing_ = false;
  bool watching_ = false;
  std::string head_;  // the streaming head, sent with the first chunk
  std::string out_;   // bytes being written
  asio::steady_timer read_timer_;  // the deadline of the request being read
  bool timed_out_ = false;
  std::unique_ptr<std::array<char, 16384>> drain_;  // while closing gracefully
};

void accept_next(HttpServer::State* state) {
  state->acceptor.async_accept(asio::make_strand(state->ioc), [state](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !state->acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors, most likely: try again shortly rather than spin.
      log_warning("accept failed: {}", ec.message());
      state->retry.expires_after(std::chrono::milliseconds(50));
      state->retry.async_wait([state](beast::error_code e) {
        if (!e) accept_next(state);
      });
      return;
    }
    auto connection = std::make_shared<Connection>(std::move(socket), *state);
    {
      std::lock_guard lock(state->registry_mutex);
      std::erase_if(state->registry, [](const auto& weak) { return weak.expired(); });
      state->registry.push_back(connection);
    }
    connection->run();
    accept_next(state);
  });
}

// Each connection holds a descriptor: lift the soft limit to the hard one.
void raise_descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler) : state_(std::make_shared<State>()) {
  state_->options = std::move(options);
  state_->handler = std::move(handler);
  const auto& o = state_->options;
  beast::error_code ec;
  asio::ip::address address = asio::ip::make_address(o.host, ec);
  if (ec) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("'{}' is not an IP address", o.host),
                "give --server-name an address such as 0.0.0.0 or 127.0.0.1");
  }
  tcp::endpoint endpoint(address, o.port);
  auto& acceptor = state_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot listen on {}:{}: {}", o.host, o.port, ec.message()),
                "choose another --server-port (or --server-name), or stop what uses this one");
  }
  port_ = acceptor.local_endpoint().port();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  raise_descriptor_limit();
  accept_next(state_.get());
  const int n = std::max(1, state_->options.io_threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([state = state_] { state->ioc.run(); });
}

void HttpServer::stop() noexcept {
  if (stopped_) return;
  stopped_ = true;
  try {
    state_->ioc.stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
    std::vector<std::shared_ptr<Connection>> live;
    {
      std::lock_guard lock(state_->registry_mutex);
      for (auto& weak : state_->registry) {
        if (auto c = weak.lock()) live.push_back(std::move(c));
      }
    }
    for (auto& c : live) c->shutdown_now();
    live.clear();
    beast::error_code ec;
    state_->acceptor.close(ec);
  } catch (...) {
    // Joining or locking failed: nothing more can be done here.
  }
}

int64_t HttpServer::open_connections() const { return state_->connections.load(); }

}  // namespace tessera::server
