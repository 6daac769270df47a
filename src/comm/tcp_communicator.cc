#include "comm/tcp_communicator.h"

#include <fmt/format.h>

#include <cstring>
#include <mutex>
#include <optional>

#include "core/error.h"

namespace tessera::comm {

namespace {

enum class Op : uint8_t { kAllReduceSum, kAllGather, kBroadcast, kBarrier, kAbort };

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduceSum: return "all_reduce_sum";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
    case Op::kBarrier: return "barrier";
    case Op::kAbort: return "abort";
  }
  return "?";
}

constexpr uint32_t kRequestMagic = 0x31524354;  // "TCR1"
constexpr uint32_t kReplyMagic = 0x31504354;    // "TCP1"
constexpr size_t kMaxMessage = 4096;            // an abort's or a failure's text

// A rank's part of a collective, rank → rank 0, then `bytes` of payload.
struct Request {
  uint32_t magic = kRequestMagic;
  Op op = Op::kBarrier;
  DType dtype = DType::kF32;
  uint16_t reserved = 0;
  int32_t root = 0;
  int64_t count = 0;
  uint64_t bytes = 0;
};

// Rank 0's answer, then `bytes` of result (ok) or of the failure's text.
struct Reply {
  uint32_t magic = kReplyMagic;
  uint32_t ok = 1;
  uint64_t bytes = 0;
};

bool is_summable(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kI32;
}

void check_host_tensor(const Tensor& t, const char* op, const char* what) {
  if (!t.defined() || !t.device().is_cpu() || !t.contiguous()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("tcp communicator {}: the {} must be a defined, contiguous host tensor (got {})", op, what,
                            t.defined() ? t.describe() : "an undefined tensor"));
  }
}

class Star final : public TcpCommunicator {
 public:
  Star(int rank, int world, std::vector<TcpSocket> sockets, std::chrono::milliseconds timeout)
      : rank_(rank), world_(world), sockets_(std::move(sockets)), timeout_(timeout) {}

  ~Star() override {
    for (auto& socket : sockets_) socket.close();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend_name() const override { return "tcp"; }

  void all_reduce_sum(Tensor& data) override {
    check_host_tensor(data, "all_reduce_sum", "tensor");
    if (!is_summable(data.dtype())) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("tcp communicator all_reduce_sum: dtype {} (f32, f16, bf16 and i32 are summed)",
                              dtype_name(data.dtype())));
    }
    run({Op::kAllReduceSum, data.dtype(), data.numel(), 0}, data.raw_data(), data.nbytes(), data.raw_data(),
        data.nbytes(), deadline_after(timeout_));
  }

  void all_gather(const Tensor& input, Tensor& output) override {
    check_host_tensor(input, "all_gather", "input");
    check_host_tensor(output, "all_gather", "output");
    if (output.dtype() != input.dtype() || output.numel() != world_ * input.numel()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("tcp communicator all_gather: output {} must be {} elements of {} ({} ranks x {})",
                              output.describe(), world_ * input.numel(), dtype_name(input.dtype()), world_,
                              input.numel()));
    }
    run({Op::kAllGather, input.dtype(), input.numel(), 0}, input.raw_data(), input.nbytes(), output.raw_data(),
        output.nbytes(), deadline_after(timeout_));
  }

  void broadcast(Tensor& data, int root) override { broadcast_until(data, root, deadline_after(timeout_)); }

  void broadcast_unbounded(Tensor& data, int root) override { broadcast_until(data, root, std::nullopt); }

  void barrier() override { run({Op::kBarrier, DType::kF32, 0, 0}, nullptr, 0, nullptr, 0, deadline_after(timeout_)); }

  void abort(const std::string& reason) noexcept override {
    try {
      std::lock_guard lock(abort_mutex_);
      if (!failure_) failure_ = fmt::format("rank {} aborted the group: {}", rank_, reason);
      const std::string text = failure_->substr(0, kMaxMessage);
      if (rank_ == 0) {
        const Reply reply{kReplyMagic, 0, text.size()};
        for (int r = 1; r < world_; ++r) send_now(r, reply, text);
      } else {
        Request request;
        request.op = Op::kAbort;
        request.bytes = text.size();
        send_now(0, request, text);
      }
    } catch (...) {
      // Allocation only; peers then see the closed connections instead.
    }
    for (auto& socket : sockets_) socket.shutdown();
  }

 private:
  struct Call {
    Op op;
    DType dtype;
    int64_t count;
    int root;
  };

  void broadcast_until(Tensor& data, int root, Deadline deadline) {
    check_host_tensor(data, "broadcast", "tensor");
    if (root < 0 || root >= world_) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("tcp communicator broadcast: root {} is not a rank of {}", root, world_));
    }
    const bool is_root = rank_ == root;
    run({Op::kBroadcast, data.dtype(), data.numel(), root}, is_root ? data.raw_data() : nullptr,
        is_root ? data.nbytes() : 0, is_root ? nullptr : data.raw_data(), is_root ? 0 : data.nbytes(), deadline);
  }

  // Payload bytes rank r sends for `call`, and the result bytes it receives.
  size_t request_bytes(const Call& call, int r) const {
    const size_t bytes = dtype_bytes(call.dtype, call.count);
    switch (call.op) {
      case Op::kAllReduceSum:
      case Op::kAllGather: return bytes;
      case Op::kBroadcast: return r == call.root ? bytes : 0;
      default: return 0;
    }
  }
  size_t reply_bytes(const Call& call, int r) const {
    const size_t bytes = dtype_bytes(call.dtype, call.count);
    switch (call.op) {
      case Op::kAllReduceSum: return bytes;
      case Op::kAllGather: return bytes * static_cast<size_t>(world_);
      case Op::kBroadcast: return r == call.root ? 0 : bytes;
      default: return 0;
    }
  }

  // One collective: `input` is this rank's payload, `output` where the result goes.
  void run(const Call& call, const void* input, size_t input_bytes, void* output, size_t output_bytes,
           Deadline deadline) {
    throw_if_failed();
    try {
      if (rank_ == 0) {
        hub(call, input, output, deadline);
      } else {
        spoke(call, input, input_bytes, output, output_bytes, deadline);
      }
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kCommFailure) throw;
      fail(e.message());
    }
  }

  // Rank 0: every rank's part in rank order, the result to each.
  void hub(const Call& call, const void* input, void* output, Deadline deadline) {
    parts_.resize(world_);
    for (int r = 1; r < world_; ++r) {
      Request request;
      sockets_[r].recv_all(&request, sizeof(request), deadline, op_name(call.op));
      if (request.magic != kRequestMagic) fail(fmt::format("rank {} sent a malformed request", r));
      if (request.op == Op::kAbort) {
        std::string text(std::min<uint64_t>(request.bytes, kMaxMessage), '\0');
        sockets_[r].recv_all(text.data(), text.size(), deadline_after(timeout_), "abort");
        fail(text);
      }
      if (request.op != call.op || request.dtype != call.dtype || request.count != call.count ||
          request.root != call.root || request.bytes != request_bytes(call, r)) {
        fail(fmt::format(
            "collectives do not match: rank 0 called {} ({} x {}, root {}), rank {} called {} ({} x {}, root {})",
            op_name(call.op), call.count, dtype_name(call.dtype), call.root, r, op_name(request.op), request.count,
            dtype_name(request.dtype), request.root));
      }
      parts_[r].resize(request.bytes);
      sockets_[r].recv_all(parts_[r].data(), request.bytes, deadline, op_name(call.op));
    }
    const size_t bytes = dtype_bytes(call.dtype, call.count);
    switch (call.op) {
      case Op::kAllReduceSum: sum_parts(call, input, output); break;
      case Op::kAllGather:
        std::memcpy(output, input, bytes);
        for (int r = 1; r < world_; ++r) std::memcpy(static_cast<char*>(output) + r * bytes, parts_[r].data(), bytes);
        break;
      case Op::kBroadcast:
        if (call.root != 0) std::memcpy(output, parts_[call.root].data(), bytes);
        break;
      default: break;
    }
    const void* result = call.op == Op::kBroadcast && call.root == 0 ? input : output;
    for (int r = 1; r < world_; ++r) {
      const Reply reply{kReplyMagic, 1, reply_bytes(call, r)};
      sockets_[r].send_all(&reply, sizeof(reply), deadline_after(timeout_), op_name(call.op));
      sockets_[r].send_all(result, reply.bytes, deadline_after(timeout_), op_name(call.op));
    }
  }

  // Elements summed over ranks 0..n-1 in that order (the thread communicator's order).
  void sum_parts(const Call& call, const void* input, void* output) {
    const auto count = static_cast<size_t>(call.count);
    auto part = [&](int r) { return r == 0 ? input : static_cast<const void*>(parts_[r].data()); };
    if (call.dtype == DType::kI32) {
      std::vector<int64_t> sum(count, 0);
      for (int r = 0; r < world_; ++r) {
        const auto* in = static_cast<const int32_t*>(part(r));
        for (size_t i = 0; i < count; ++i) sum[i] += in[i];
      }
      auto* out = static_cast<int32_t*>(output);
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(sum[i]);
      return;
    }
    sum_.assign(count, 0.0f);
    converted_.resize(count);
    for (int r = 0; r < world_; ++r) {
      convert_to_f32(call.dtype, part(r), converted_.data(), count);
      for (size_t i = 0; i < count; ++i) sum_[i] += converted_[i];
    }
    convert_from_f32(sum_.data(), call.dtype, output, count);
  }

  // Any other rank: its part to rank 0, the result back.
  void spoke(const Call& call, const void* input, size_t input_bytes, void* output, size_t output_bytes,
             Deadline deadline) {
    TcpSocket& hub = sockets_.at(0);
    Request request;
    request.op = call.op;
    request.dtype = call.dtype;
    request.root = call.root;
    request.count = call.count;
    request.bytes = input_bytes;
    Reply reply;
    try {
      hub.send_all(&request, sizeof(request), deadline_after(timeout_), op_name(call.op));
      hub.send_all(input, input_bytes, deadline_after(timeout_), op_name(call.op));
    } catch (const Error&) {
      // Rank 0 may have failed the group and closed while this rank was
      // still sending: its reply, if it came, says why.
      const std::exception_ptr send_error = std::current_exception();
      std::string text;
      try {
        hub.recv_all(&reply, sizeof(reply), deadline_after(std::chrono::milliseconds(100)), op_name(call.op));
        if (reply.magic == kReplyMagic && !reply.ok) {
          text.resize(std::min<uint64_t>(reply.bytes, kMaxMessage));
          hub.recv_all(text.data(), text.size(), deadline_after(std::chrono::milliseconds(100)), "failure");
        }
      } catch (const Error&) {
        text.clear();
      }
      if (text.empty()) std::rethrow_exception(send_error);
      fail(text);
    }
    hub.recv_all(&reply, sizeof(reply), deadline, op_name(call.op));
    if (reply.magic != kReplyMagic) fail("rank 0 sent a malformed reply");
    if (!reply.ok) {
      std::string text(std::min<uint64_t>(reply.bytes, kMaxMessage), '\0');
      hub.recv_all(text.data(), text.size(), deadline_after(timeout_), "failure");
      fail(text);
    }
    if (reply.bytes != output_bytes) {
      fail(fmt::format("rank 0 answered {} with {} bytes, expected {}", op_name(call.op), reply.bytes, output_bytes));
    }
    hub.recv_all(output, output_bytes, deadline_after(timeout_), op_name(call.op));
  }

  template <typename Header>
  void send_now(int r, const Header& header, const std::string& text) noexcept {
    if (r < 0 || r >= static_cast<int>(sockets_.size())) return;
    sockets_[r].send_now(&header, sizeof(header));
    sockets_[r].send_now(text.data(), text.size());
  }

  // Records the group's failure, tells the other ranks (rank 0) and throws.
  [[noreturn]] void fail(const std::string& why) {
    {
      std::lock_guard lock(abort_mutex_);
      if (!failure_) failure_ = why;
    }
    abort(why);
    throw_if_failed();
    throw Error(ErrorKind::kInternal, "tcp communicator: failed without a failure");
  }

  void throw_if_failed() {
    std::lock_guard lock(abort_mutex_);
    if (failure_) {
      throw Error(ErrorKind::kCommFailure, fmt::format("tcp communicator, rank {}: {}", rank_, *failure_),
                  "a failed group stays failed; a rank that is gone is named above: its node's log says why");
    }
  }

  const int rank_;
  const int world_;
  std::vector<TcpSocket> sockets_;
  const std::chrono::milliseconds timeout_;
  std::mutex abort_mutex_;  // guards failure_ (abort may come from another thread)
  std::optional<std::string> failure_;
  std::vector<std::vector<char>> parts_;  // rank 0: each rank's payload of the current collective
  std::vector<float> sum_, converted_;
};

}  // namespace

std::unique_ptr<TcpCommunicator> make_tcp_communicator(int rank, int world_size, std::vector<TcpSocket> sockets,
                                                       std::chrono::milliseconds timeout) {
  const size_t expected = rank == 0 ? static_cast<size_t>(world_size) : 1;
  if (world_size < 1 || rank < 0 || rank >= world_size || sockets.size() != expected) {
    throw Error(ErrorKind::kInternal, fmt::format("tcp communicator: rank {} of {} with {} sockets", rank, world_size,
                                                  sockets.size()));
  }
  // Errors name the rank at the other end, not only its address.
  for (size_t i = 0; i < sockets.size(); ++i) {
    const int peer = rank == 0 ? static_cast<int>(i) : 0;
    sockets[i].set_peer(fmt::format("rank {} at {}", peer, sockets[i].peer()));
  }
  return std::make_unique<Star>(rank, world_size, std::move(sockets), timeout);
}

}  // namespace tessera::comm
