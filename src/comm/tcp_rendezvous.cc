#include "comm/tcp_rendezvous.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace tessera::comm {

namespace {

constexpr uint32_t kHelloMagic = 0x4f4c4548;    // "HELO"
constexpr uint32_t kWelcomeMagic = 0x434c4557;  // "WELC"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxText = 1 << 16;

struct Hello {
  uint32_t magic = kHelloMagic;
  uint32_t version = kVersion;
  int32_t world_size = 0;
  int32_t nnodes = 0;
  int32_t node_rank = 0;
  int32_t rank = 0;
  int64_t offer = 0;
  uint32_t fingerprint_bytes = 0;
  uint32_t reserved = 0;
};

struct Welcome {
  uint32_t magic = kWelcomeMagic;
  uint32_t ok = 1;
  int64_t agreed_offer = 0;
  uint32_t has_nccl_id = 0;
  uint32_t text_bytes = 0;  // the refusal's reason when !ok
  NcclUniqueId nccl_id;
};

void send_text(TcpSocket& socket, const std::string& text, Deadline deadline, const char* what) {
  socket.send_all(text.data(), text.size(), deadline, what);
}

std::string recv_text(TcpSocket& socket, uint32_t bytes, Deadline deadline, const char* what) {
  if (bytes > kMaxText) throw Error(ErrorKind::kCommFailure, fmt::format("{}: {} sent a malformed message", what, socket.peer()));
  std::string text(bytes, '\0');
  socket.recv_all(text.data(), bytes, deadline, what);
  return text;
}

void send_refusal(TcpSocket& socket, const std::string& reason) noexcept {
  Welcome welcome;
  welcome.ok = 0;
  welcome.text_bytes = static_cast<uint32_t>(std::min<size_t>(reason.size(), kMaxText));
  socket.send_now(&welcome, sizeof(welcome));
  socket.send_now(reason.data(), welcome.text_bytes);
}

// The hello of global rank `rank`, sent on `socket`.
void say_hello(TcpSocket& socket, const RendezvousOptions& o, int rank, Deadline deadline) {
  Hello hello;
  hello.world_size = o.world_size;
  hello.nnodes = o.nnodes;
  hello.node_rank = o.node_rank;
  hello.rank = rank;
  hello.offer = o.offer;
  hello.fingerprint_bytes = static_cast<uint32_t>(o.fingerprint.size());
  socket.send_all(&hello, sizeof(hello), deadline, "rendezvous hello");
  send_text(socket, o.fingerprint, deadline, "rendezvous hello");
}

// What node 0 says to one rank.
Welcome read_welcome(TcpSocket& socket, Deadline deadline, int node_rank) {
  Welcome welcome;
  socket.recv_all(&welcome, sizeof(welcome), deadline, "waiting for node 0 to accept this node");
  if (welcome.magic != kWelcomeMagic) {
    throw Error(ErrorKind::kCommFailure, fmt::format("{} is not a tessera node 0", socket.peer()),
                "check --master-addr and --master-port");
  }
  if (!welcome.ok) {
    const std::string reason = recv_text(socket, welcome.text_bytes, deadline, "rendezvous");
    throw Error(ErrorKind::kCommFailure, fmt::format("node 0 refused node {}: {}", node_rank, reason),
                "start every node with the same model, --tp, --nnodes and flags, each with its own --node-rank");
  }
  return welcome;
}

int node_of_rank(int rank, const RendezvousOptions& o) { return rank / (o.world_size / o.nnodes); }

// Ranks still in the listener's queue would wait for an answer until their
// timeout: each gets the refusal too, its hello read first (a socket closed
// with unread data resets the connection, and the refusal would be lost).
void refuse_queued(TcpListener& listener, const std::string& reason) {
  while (true) {
    try {
      TcpSocket queued = listener.accept(*deadline_after(std::chrono::milliseconds(200)), "refusing");
      Hello ignored;
      queued.recv_all(&ignored, sizeof(ignored), deadline_after(std::chrono::milliseconds(200)), "hello");
      if (ignored.fingerprint_bytes <= kMaxText) {
        recv_text(queued, ignored.fingerprint_bytes, deadline_after(std::chrono::milliseconds(200)), "hello");
      }
      send_refusal(queued, reason);
    } catch (const Error&) {
      return;  // the queue is empty
    }
  }
}

// Node 0: accepts every other rank, checks its hello, answers all.
void gather_ranks(const RendezvousOptions& o, TcpListener& listener, Deadline deadline,
                  std::vector<TcpSocket>& hub_sockets, int64_t& agreed) {
  const int world = o.world_size;
  hub_sockets.resize(world);
  int connected = 0;
  while (connected < world - 1) {
    TcpSocket socket = listener.accept(*deadline, fmt::format("node 0 waiting for {} more rank(s) of the {}-node group",
                                                             world - 1 - connected, o.nnodes).c_str());
    Hello hello;
    try {
      socket.recv_all(&hello, sizeof(hello), deadline_after(std::chrono::seconds(30)), "rendezvous hello");
    } catch (const Error&) {
      continue;  // not one of ours (a port scanner, a health check): wait for the next
    }
    if (hello.magic != kHelloMagic || hello.version != kVersion || hello.fingerprint_bytes > kMaxText) {
      send_refusal(socket, "not a tessera rendezvous of this version");
      continue;
    }
    const std::string fingerprint = recv_text(socket, hello.fingerprint_bytes, deadline, "rendezvous hello");
    std::string reason;
    if (hello.world_size != o.world_size || hello.nnodes != o.nnodes) {
      reason = fmt::format("node {} was started with --tp {} --nnodes {}, node 0 with --tp {} --nnodes {}",
                           hello.node_rank, hello.world_size, hello.nnodes, o.world_size, o.nnodes);
    } else if (hello.rank < 1 || hello.rank >= world || node_of_rank(hello.rank, o) != hello.node_rank) {
      reason = fmt::format("rank {} does not belong to node {}", hello.rank, hello.node_rank);
    } else if (hub_sockets[hello.rank].is_open()) {
      reason = fmt::format("node {} joined twice (two processes with --node-rank {})", hello.node_rank,
                           hello.node_rank);
    } else if (fingerprint != o.fingerprint) {
      reason = fmt::format("node {} runs {}, node 0 runs {}", hello.node_rank, fingerprint, o.fingerprint);
    }
    if (!reason.empty()) {
      send_refusal(socket, reason);
      // A node with other settings fails the whole start-up: say so on node 0
      // too, after telling every rank already connected.
      for (auto& s : hub_sockets) {
        if (s.is_open()) send_refusal(s, reason);
      }
      refuse_queued(listener, reason);
      throw Error(ErrorKind::kCommFailure, fmt::format("multi-node start-up: {}", reason),
                  "start every node with the same model, --tp, --nnodes and flags, each with its own --node-rank");
    }
    agreed = std::min(agreed, hello.offer);
    hub_sockets[hello.rank] = std::move(socket);
    ++connected;
  }
}

}  // namespace

int ranks_per_node(int world_size, int nnodes, int node_rank) {
  if (nnodes < 1 || world_size % nnodes != 0 || world_size < nnodes) {
    std::vector<std::string> fits;
    for (int tp = nnodes; tp <= 8 * nnodes; tp += nnodes) fits.push_back(std::to_string(tp));
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--tp {} does not split over --nnodes {}: every node runs the same number of ranks",
                            world_size, nnodes),
                fmt::format("use --tp {}", fmt::join(fits, ", ")));
  }
  if (node_rank < 0 || node_rank >= nnodes) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--node-rank {} is not a node of --nnodes {}", node_rank, nnodes),
                fmt::format("use --node-rank 0 .. {}", nnodes - 1));
  }
  return world_size / nnodes;
}

Rendezvous rendezvous(const RendezvousOptions& o, TcpListener* listener) {
  const int world = o.world_size;
  const int local = ranks_per_node(world, o.nnodes, o.node_rank);
  const Deadline deadline = deadline_after(o.timeout);
  Rendezvous result;
  result.first_rank = o.node_rank * local;
  std::vector<TcpSocket> spokes;  // this node's ranks other than rank 0, each connected to rank 0
  if (o.node_rank == 0) {
    std::optional<TcpListener> own;
    if (!listener) listener = &own.emplace(o.master_port);
    result.port = listener->port();
    // Rank 0's own peers connect over loopback; the listener's backlog holds
    // them until the loop below accepts them with everyone else.
    for (int r = 1; r < local; ++r) {
      spokes.push_back(TcpSocket::connect("127.0.0.1", result.port, *deadline));
      say_hello(spokes.back(), o, r, deadline);
    }
    std::vector<TcpSocket> hub;
    int64_t agreed = o.offer;
    gather_ranks(o, *listener, deadline, hub, agreed);
    Welcome welcome;
    welcome.agreed_offer = agreed;
    if (o.share_nccl_id) {
      welcome.has_nccl_id = 1;
      welcome.nccl_id = make_nccl_unique_id();
      result.nccl_id = welcome.nccl_id;
    }
    for (int r = 1; r < world; ++r) hub[r].send_all(&welcome, sizeof(welcome), deadline, "rendezvous welcome");
    for (auto& spoke : spokes) read_welcome(spoke, deadline, 0);
    result.agreed_offer = agreed;
    result.links.push_back(make_tcp_communicator(0, world, std::move(hub), o.comm_timeout));
  } else {
    for (int r = 0; r < local; ++r) {
      spokes.push_back(TcpSocket::connect(o.master_addr, o.master_port, *deadline));
      say_hello(spokes.back(), o, result.first_rank + r, deadline);
    }
    for (auto& spoke : spokes) {
      const Welcome welcome = read_welcome(spoke, deadline, o.node_rank);
      result.agreed_offer = welcome.agreed_offer;
      if (welcome.has_nccl_id) result.nccl_id = welcome.nccl_id;
    }
  }
  const int first_spoke = o.node_rank == 0 ? 1 : result.first_rank;
  for (size_t i = 0; i < spokes.size(); ++i) {
    std::vector<TcpSocket> one;
    one.push_back(std::move(spokes[i]));
    result.links.push_back(make_tcp_communicator(first_spoke + static_cast<int>(i), world, std::move(one),
                                                 o.comm_timeout));
  }
  return result;
}

}  // namespace tessera::comm
