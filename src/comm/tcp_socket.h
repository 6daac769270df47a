// TcpSocket and TcpListener: blocking TCP over POSIX sockets with deadlines,
// the wire under the multi-node rendezvous and the `tcp` communicator.
//
// Why by hand: Boost.Asio (a dependency of the server) has no deadline on a
// synchronous read, and what the ranks need is small: connect with retries
// (a node may start before node 0 listens), send and receive whole buffers,
// each waiting at most until a deadline. Every failure — refused, reset, closed
// by the peer, past the deadline — is Error(kCommFailure) naming the peer and
// what was being waited for; nothing raises SIGPIPE (MSG_NOSIGNAL).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace tessera::comm {

using Clock = std::chrono::steady_clock;
// No deadline: wait until the data comes or the peer closes.
using Deadline = std::optional<Clock::time_point>;

inline Deadline deadline_after(std::chrono::milliseconds timeout) { return Clock::now() + timeout; }

class TcpSocket {
 public:
  TcpSocket() = default;
  TcpSocket(int fd, std::string peer);
  ~TcpSocket();
  TcpSocket(TcpSocket&& other) noexcept;
  TcpSocket& operator=(TcpSocket&& other) noexcept;
  TcpSocket(const TcpSocket&) = delete;
  TcpSocket& operator=(const TcpSocket&) = delete;

  // Connects to host:port, retrying refused connections until the deadline
  // (the listener may not be up yet). Throws Error(kCommFailure) naming the
  // address when the name does not resolve or the deadline passes.
  static TcpSocket connect(const std::string& host, int port, Clock::time_point deadline);

  bool is_open() const { return fd_ >= 0; }
  const std::string& peer() const { return peer_; }  // "host:port", for messages
  void set_peer(std::string peer) { peer_ = std::move(peer); }

  // Sends or receives exactly `bytes`; `what` names the wait in errors.
  void send_all(const void* data, size_t bytes, Deadline deadline, const char* what);
  void recv_all(void* data, size_t bytes, Deadline deadline, const char* what);
  // Sends what the kernel takes at once, never waits, never throws (abort paths).
  void send_now(const void* data, size_t bytes) noexcept;
  // Ends the connection both ways but keeps the descriptor (safe while
  // another thread waits on it: that wait ends); a peer sees end-of-stream.
  void shutdown() noexcept;
  // Shuts down and releases the descriptor (the owning thread only).
  void close() noexcept;

 private:
  int fd_ = -1;
  std::string peer_;
};

class TcpListener {
 public:
  // Listens on every interface at `port` (0: a free port, see port()). Throws
  // Error(kCommFailure) when the port is taken, naming --master-port.
  explicit TcpListener(int port, int backlog = 64);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  int port() const { return port_; }
  // The next connection; Error(kCommFailure) when none comes by the deadline.
  TcpSocket accept(Clock::time_point deadline, const char* what);

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace tessera::comm
