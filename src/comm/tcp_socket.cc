#include "comm/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace tessera::comm {

namespace {

[[noreturn]] void fail(const std::string& message) { throw Error(ErrorKind::kCommFailure, message); }

// Milliseconds poll may wait: -1 without a deadline, 0 once it has passed.
int poll_timeout(Deadline deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Waits until fd is ready for `events`; false when the deadline passed first.
bool wait_ready(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, poll_timeout(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) fail(fmt::format("poll failed: {}", std::strerror(errno)));
  }
}

void set_options(int fd) {
  const int one = 1;
  // Collectives are small request/reply exchanges: Nagle's delay would add
  // up to 40 ms to each.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

std::string describe_address(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
    port = ntohs(in->sin6_port);
  }
  return fmt::format("{}:{}", host, port);
}

}  // namespace

TcpSocket::TcpSocket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}

TcpSocket::~TcpSocket() { close(); }

TcpSocket::TcpSocket(TcpSocket&& other) noexcept : fd_(other.fd_), peer_(std::move(other.peer_)) { other.fd_ = -1; }

TcpSocket& TcpSocket::operator=(TcpSocket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    peer_ = std::move(other.peer_);
    other.fd_ = -1;
  }
  return *this;
}

void TcpSocket::close() noexcept {
  if (fd_ >= 0) {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    fd_ = -1;
  }
}

TcpSocket TcpSocket::connect(const std::string& host, int port, Clock::time_point deadline) {
  const std::string peer = fmt::format("{}:{}", host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    throw Error(ErrorKind::kCommFailure, fmt::format("cannot resolve {}: {}", host, ::gai_strerror(rc)),
                "check --master-addr");
  }
  std::string last_error = "no address";
  while (true) {
    for (addrinfo* a = found; a; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) {
        last_error = std::strerror(errno);
        continue;
      }
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        ::freeaddrinfo(found);
        set_options(fd);
        return TcpSocket(fd, peer);
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    if (Clock::now() >= deadline) break;
    // Node 0 may still be loading its weights: try again shortly.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::freeaddrinfo(found);
  throw Error(ErrorKind::kCommFailure, fmt::format("cannot connect to node 0 at {}: {}", peer, last_error),
              "start node 0 (--node-rank 0) and check --master-addr and --master-port on every node");
}

void TcpSocket::send_all(const void* data, size_t bytes, Deadline deadline, const char* what) {
  if (fd_ < 0) fail(fmt::format("{}: the connection to {} is closed", what, peer_));
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd_, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd_, POLLOUT, deadline)) fail(fmt::format("{}: {} did not take the data in time", what, peer_));
      continue;
    }
    if (errno == ECONNRESET || errno == EPIPE) {
      fail(fmt::format("{}: {} closed the connection ({})", what, peer_, std::strerror(errno)));
    }
    fail(fmt::format("{}: sending to {} failed: {}", what, peer_, std::strerror(errno)));
  }
}

void TcpSocket::recv_all(void* data, size_t bytes, Deadline deadline, const char* what) {
  if (fd_ < 0) fail(fmt::format("{}: the connection to {} is closed", what, peer_));
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd_, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) fail(fmt::format("{}: {} closed the connection", what, peer_));
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd_, POLLIN, deadline)) fail(fmt::format("{}: nothing came from {} in time", what, peer_));
      continue;
    }
    if (errno == ECONNRESET) fail(fmt::format("{}: {} closed the connection (reset)", what, peer_));
    fail(fmt::format("{}: receiving from {} failed: {}", what, peer_, std::strerror(errno)));
  }
}

void TcpSocket::send_now(const void* data, size_t bytes) noexcept {
  if (fd_ >= 0) {
    [[maybe_unused]] ssize_t n = ::send(fd_, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

void TcpSocket::shutdown() noexcept {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

TcpListener::TcpListener(int port, int backlog) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) fail(fmt::format("cannot create a socket: {}", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  ::fcntl(fd_, F_SETFD, FD_CLOEXEC);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::listen(fd_, backlog) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
    throw Error(ErrorKind::kCommFailure, fmt::format("node 0 cannot listen on port {}: {}", port, reason),
                "pick a free port with --master-port (the same on every node)");
  }
  socklen_t length = sizeof(address);
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) ::close(fd_);
}

TcpSocket TcpListener::accept(Clock::time_point deadline, const char* what) {
  while (true) {
    if (!wait_ready(fd_, POLLIN, deadline)) fail(fmt::format("{}: no connection came in time", what));
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    const int fd = ::accept(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    if (fd >= 0) {
      set_options(fd);
      return TcpSocket(fd, describe_address(address));
    }
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
      fail(fmt::format("{}: accept failed: {}", what, std::strerror(errno)));
    }
  }
}

}  // namespace tessera::comm
