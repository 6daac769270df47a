#include "comm/peer_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/comm_plan.h"
#include "comm/custom_all_reduce.h"
#include "comm/group_abort.h"
#include "comm/nccl_communicator.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::comm {

namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    throw Error(ErrorKind::kCommFailure, fmt::format("CUDA {} in the custom communicator: {}", what,
                                                     cudaGetErrorString(error)));
  }
}

// One rank's registered memory, on its device.
struct RankBuffers {
  int device = 0;
  void* data = nullptr;  // [capacity] staging: a collective's input is copied here
  void* tmp = nullptr;   // [capacity] two-shot's reduced part
  cuda::Signal* signal = nullptr;
};

class PeerGroup;

class PeerCommunicator final : public Communicator {
 public:
  PeerCommunicator(std::shared_ptr<PeerGroup> group, int rank, int world, int device, cudaStream_t stream,
                   const cuda::PeerBuffers& peers, std::unique_ptr<Communicator> nccl);
  ~PeerCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend_name() const override;

  void all_reduce_sum(Tensor& data) override;
  void all_gather(const Tensor& input, Tensor& output) override;
  void broadcast(Tensor& data, int root) override;
  void barrier() override;
  void abort(const std::string& reason) noexcept override;

 private:
  void check_tensor(const Tensor& t, const char* op) const;
  // Throws when a kernel of the group left a barrier early or a rank aborted.
  void throw_if_failed(const char* op) const;
  // After queuing a collective: waits for it on the host (same-device, or
  // `wait`), else only looks at the status word.
  void finish(const char* op, bool wait);

  std::shared_ptr<PeerGroup> group_;
  int rank_, world_, device_;
  cudaStream_t stream_;
  cuda::PeerBuffers peers_;
  std::unique_ptr<Communicator> nccl_;  // custom with NCCL: large all-reduces and the other collectives
  cudaEvent_t done_ = nullptr;
};

class PeerGroup final : public CommGroup, public std::enable_shared_from_this<PeerGroup> {
 public:
  PeerGroup(const CommPlan& plan, int world, const CommGroupOptions& options)
      : plan_(plan), world_(world), options_(options), buffers_(world) {
    if (plan.kind != CommKind::kCustom && plan.kind != CommKind::kSameDevice) {
      throw Error(ErrorKind::kInternal, "a peer group is for the custom and same-device communicators");
    }
    if (world < 1 || world > cuda::kMaxRanks || static_cast<int>(plan.devices.size()) != world) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("the {} communicator takes 1 to {} ranks with one device each (got {} ranks, {} devices)",
                              comm_kind_name(plan.kind), cuda::kMaxRanks, world, plan.devices.size()),
                  "use a --tp of at most 8");
    }
    check_cuda(cudaSetDevice(plan.devices[0]), "cudaSetDevice");
    void* words = nullptr;
    check_cuda(cudaHostAlloc(&words, 2 * sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
    words_ = static_cast<volatile int*>(words);
    words_[0] = 0;  // abort: host → kernels
    words_[1] = 0;  // status: kernels → host
    abort_ = std::make_shared<GroupAbort>();
    abort_->device_word = &words_[0];
    if (plan.kind == CommKind::kCustom && nccl_available()) nccl_id_ = make_nccl_unique_id();
  }

  ~PeerGroup() override {
    abort_->device_word = nullptr;
    int current = 0;
    cudaGetDevice(&current);
    for (const auto& b : buffers_) {
      if (!b) continue;
      cudaSetDevice(b->device);
      if (b->data) cudaFree(b->data);
      if (b->tmp) cudaFree(b->tmp);
      if (b->signal) cudaFree(b->signal);
    }
    cudaSetDevice(current);
    if (words_) cudaFreeHost(const_cast<int*>(words_));
  }

  CommKind kind() const override { return plan_.kind; }
  int world_size() const override { return world_; }

  std::unique_ptr<Communicator> make_rank(int rank, void* stream) override {
    try {
      return make_rank_or_throw(rank, static_cast<cudaStream_t>(stream));
    } catch (const std::exception& e) {
      abort_->raise(rank, e.what());  // peers waiting at the exchange leave at once
      throw;
    }
  }

  void abort(int rank, const std::string& reason) noexcept override { abort_->raise(rank, reason); }

  cuda::SyncControl control() const {
    cuda::SyncControl c;
    c.abort = &words_[0];
    c.status = &words_[1];
    c.timeout_ns = static_cast<unsigned long long>(options_.timeout.count()) * 1000000ull;
    // Ranks sharing one GPU spin at barriers side by side: small grids keep them all resident.
    c.max_blocks = plan_.kind == CommKind::kSameDevice ? std::max(2, 32 / world_) : cuda::kMaxBlocks;
    return c;
  }
  int status() const { return words_[1]; }
  const GroupAbort& group_abort() const { return *abort_; }
  GroupAbort& group_abort() { return *abort_; }
  const CommGroupOptions& options() const { return options_; }
  bool waits_each_collective() const { return plan_.kind == CommKind::kSameDevice; }

 private:
  std::unique_ptr<Communicator> make_rank_or_throw(int rank, cudaStream_t stream) {
    if (rank < 0 || rank >= world_) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("rank {} of a group of {}", rank, world_));
    }
    const int device = plan_.devices[rank];
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    std::unique_ptr<Communicator> nccl;
    if (nccl_id_) {
      NcclCommOptions nccl_options;
      nccl_options.timeout = options_.timeout;
      nccl_options.group_abort = abort_;
      nccl = make_nccl_communicator(*nccl_id_, rank, world_, device, stream, nccl_options);
    }
    if (plan_.kind == CommKind::kCustom) enable_peer_access(device, plan_.devices);

    auto mine = std::make_unique<RankBuffers>();
    mine->device = device;
    check_cuda(cudaMalloc(&mine->data, kCustomMaxBytes), "cudaMalloc (staging buffer)");
    check_cuda(cudaMalloc(&mine->tmp, kCustomMaxBytes), "cudaMalloc (two-shot buffer)");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&mine->signal), sizeof(cuda::Signal)), "cudaMalloc (signals)");
    check_cuda(cudaMemset(mine->signal, 0, sizeof(cuda::Signal)), "cudaMemset (signals)");
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // zeroed before any peer writes a flag

    cuda::PeerBuffers peers;
    {
      std::unique_lock lock(mutex_);
      if (buffers_[rank]) throw Error(ErrorKind::kInternal, fmt::format("rank {} joined its group twice", rank));
      buffers_[rank] = std::move(mine);
      ++registered_;
      arrived_.notify_all();
      const auto deadline = Clock::now() + options_.timeout;
      while (registered_ < world_) {
        if (abort_->raised()) throw Error(ErrorKind::kCommFailure, abort_->message());
        if (Clock::now() > deadline) {
          std::string missing;
          for (int r = 0; r < world_; ++r) {
            if (!buffers_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          }
          throw Error(ErrorKind::kCommFailure,
                      fmt::format("{} communicator: rank(s) {} did not register their buffers within {} ms",
                                  comm_kind_name(plan_.kind), missing, options_.timeout.count()),
                      "a rank failed to start: look for its error");
        }
        arrived_.wait_for(lock, std::chrono::milliseconds(50));
      }
      for (int r = 0; r < world_; ++r) {
        peers.data[r] = buffers_[r]->data;
        peers.tmp[r] = buffers_[r]->tmp;
        peers.signal[r] = buffers_[r]->signal;
      }
    }
    return std::make_unique<PeerCommunicator>(shared_from_this(), rank, world_, device, stream, peers,
                                              std::move(nccl));
  }

  CommPlan plan_;
  int world_;
  CommGroupOptions options_;
  volatile int* words_ = nullptr;  // pinned, mapped into every device
  std::shared_ptr<GroupAbort> abort_;
  std::optional<NcclUniqueId> nccl_id_;

  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<std::unique_ptr<RankBuffers>> buffers_;  // guarded by mutex_ until every rank registered
  int registered_ = 0;
};

std::optional<cuda::ElementType> element_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return cuda::ElementType::kF32;
    case DType::kF16: return cuda::ElementType::kF16;
    case DType::kBF16: return cuda::ElementType::kBF16;
    default: return std::nullopt;
  }
}

PeerCommunicator::PeerCommunicator(std::shared_ptr<PeerGroup> group, int rank, int world, int device,
                                   cudaStream_t stream, const cuda::PeerBuffers& peers,
                                   std::unique_ptr<Communicator> nccl)
    : group_(std::move(group)), rank_(rank), world_(world), device_(device), stream_(stream), peers_(peers),
      nccl_(std::move(nccl)) {
  check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
}

// Waits for this rank's own kernels (they leave their barriers when the group
// failed), so the group's buffers are freed only when no kernel uses them.
PeerCommunicator::~PeerCommunicator() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  cudaGetLastError();
  if (done_) cudaEventDestroy(done_);
}

std::string PeerCommunicator::backend_name() const {
  return group_->kind() == CommKind::kSameDevice ? "same-device" : (nccl_ ? "custom+nccl" : "custom");
}

void PeerCommunicator::check_tensor(const Tensor& t, const char* op) const {
  if (!t.defined() || !t.contiguous() || t.device().is_cpu() || t.device().index != device_) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} {}: needs a contiguous tensor on cuda:{} (got {})", backend_name(), op, device_,
                            t.defined() ? t.describe() : "an undefined tensor"));
  }
}

void PeerCommunicator::throw_if_failed(const char* op) const {
  const int status = group_->status();
  if (group_->group_abort().raised()) {
    throw Error(ErrorKind::kCommFailure,
                fmt::format("{} {} on rank {}: {}", backend_name(), op, rank_, group_->group_abort().message()),
                "look for the first error of the group");
  }
  if (status == cuda::kStatusTimedOut) {
    throw Error(ErrorKind::kCommFailure,
                fmt::format("{} {} on rank {}: a rank did not reach a barrier within {} ms", backend_name(), op, rank_,
                            group_->options().timeout.count()),
                "a rank did not arrive: look for an earlier error on another rank");
  }
  if (status != cuda::kStatusOk) {
    throw Error(ErrorKind::kCommFailure, fmt::format("{} {} on rank {}: the group was aborted", backend_name(), op, rank_));
  }
}

void PeerCommunicator::finish(const char* op, bool wait) {
  if (!wait && !group_->waits_each_collective()) {
    throw_if_failed(op);
    return;
  }
  check_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord");
  // The kernels leave by themselves after the timeout; the host allows them a little more.
  const auto deadline = Clock::now() + group_->options().timeout + std::chrono::seconds(10);
  while (true) {
    const cudaError_t query = cudaEventQuery(done_);
    if (query == cudaSuccess) break;
    if (query != cudaErrorNotReady) check_cuda(query, op);
    throw_if_failed(op);
    if (Clock::now() > deadline) {
      abort(fmt::format("{} did not complete on rank {}", op, rank_));
      throw Error(ErrorKind::kCommFailure,
                  fmt::format("{} {} on rank {} did not complete within {} ms", backend_name(), op, rank_,
                              group_->options().timeout.count()),
                  "a rank did not arrive: look for an earlier error on another rank");
    }
    std::this_thread::yield();
  }
  throw_if_failed(op);
}

void PeerCommunicator::all_reduce_sum(Tensor& data) {
  check_tensor(data, "all_reduce_sum");
  const std::optional<cuda::ElementType> type = element_type(data.dtype());
  if (nccl_ && (!type || data.nbytes() > kCustomMaxBytes)) {
    throw_if_failed("all_reduce_sum");
    nccl_->all_reduce_sum(data);  // waits for the stream: earlier kernels are done too
    throw_if_failed("all_reduce_sum");
    return;
  }
  if (!type) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{} all_reduce_sum: dtype {} (f32, f16 and bf16 only)", backend_name(),
                            dtype_name(data.dtype())));
  }
  throw_if_failed("all_reduce_sum");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const size_t element = dtype_bytes(data.dtype(), 1);
  const int64_t count = data.numel();
  const int64_t chunk = static_cast<int64_t>(kCustomMaxBytes / element);
  auto* base = static_cast<char*>(data.raw_data());
  for (int64_t offset = 0; offset < count; offset += chunk) {
    const int64_t n = std::min(chunk, count - offset);
    void* target = base + offset * element;
    check_cuda(cudaMemcpyAsync(peers_.data[rank_], target, n * element, cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync");
    const bool two_shot = pick_all_reduce(n * element, world_, group_->options().algorithm) == AllReduceAlgorithm::kTwoShot;
    cuda::launch_all_reduce(peers_, rank_, world_, *type, n, target, two_shot, group_->control(), stream_);
  }
  finish("all_reduce_sum", false);
}

void PeerCommunicator::all_gather(const Tensor& input, Tensor& output) {
  check_tensor(input, "all_gather");
  check_tensor(output, "all_gather");
  if (output.dtype() != input.dtype() || output.numel() != world_ * input.numel()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} all_gather: output {} must be {} x {} elements of {}", backend_name(), output.describe(),
                            world_, input.numel(), dtype_name(input.dtype())));
  }
  throw_if_failed("all_gather");
  if (nccl_) {
    nccl_->all_gather(input, output);
    throw_if_failed("all_gather");
    return;
  }
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const size_t bytes = input.nbytes();
  auto* in = static_cast<const char*>(input.raw_data());
  auto* out = static_cast<char*>(output.raw_data());
  for (size_t offset = 0; offset < bytes; offset += kCustomMaxBytes) {
    const size_t n = std::min(kCustomMaxBytes, bytes - offset);
    check_cuda(cudaMemcpyAsync(peers_.data[rank_], in + offset, n, cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync");
    cuda::launch_gather(peers_, rank_, world_, n, out + offset, bytes, group_->control(), stream_);
  }
  finish("all_gather", true);  // the forward's last collective: its result is read on the host next
}

void PeerCommunicator::broadcast(Tensor& data, int root) {
  check_tensor(data, "broadcast");
  if (root < 0 || root >= world_) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} broadcast: root {} of {} ranks", backend_name(), root, world_));
  }
  throw_if_failed("broadcast");
  if (nccl_) {
    nccl_->broadcast(data, root);
    throw_if_failed("broadcast");
    return;
  }
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const size_t bytes = data.nbytes();
  auto* base = static_cast<char*>(data.raw_data());
  for (size_t offset = 0; offset < bytes; offset += kCustomMaxBytes) {
    const size_t n = std::min(kCustomMaxBytes, bytes - offset);
    if (rank_ == root) {
      check_cuda(cudaMemcpyAsync(peers_.data[rank_], base + offset, n, cudaMemcpyDeviceToDevice, stream_),
                 "cudaMemcpyAsync");
    }
    cuda::launch_broadcast(peers_, rank_, world_, root, n, base + offset, group_->control(), stream_);
  }
  finish("broadcast", false);
}

void PeerCommunicator::barrier() {
  throw_if_failed("barrier");
  if (nccl_) {
    nccl_->barrier();
    throw_if_failed("barrier");
    return;
  }
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  cuda::launch_barrier(peers_, rank_, world_, group_->control(), stream_);
  finish("barrier", true);
}

void PeerCommunicator::abort(const std::string& reason) noexcept {
  group_->group_abort().raise(rank_, reason);
  if (nccl_) nccl_->abort(reason);
}

}  // namespace

void enable_peer_access(int device, const std::vector<int>& devices) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  for (int peer : devices) {
    if (peer == device) continue;
    int can = 0;
    check_cuda(cudaDeviceCanAccessPeer(&can, device, peer), "cudaDeviceCanAccessPeer");
    if (!can) {
      throw Error(ErrorKind::kCommFailure, fmt::format("cuda:{} cannot access cuda:{}'s memory (no peer access)", device, peer),
                  "run with --disable-custom-all-reduce to use NCCL alone");
    }
    const cudaError_t result = cudaDeviceEnablePeerAccess(peer, 0);
    if (result == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();  // enabled by an earlier group: fine
    } else {
      check_cuda(result, "cudaDeviceEnablePeerAccess");
    }
  }
}

std::shared_ptr<CommGroup> make_peer_comm_group(const CommPlan& plan, int world_size, const CommGroupOptions& options) {
  return std::make_shared<PeerGroup>(plan, world_size, options);
}

std::vector<std::vector<bool>> query_peer_access() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  std::vector<std::vector<bool>> matrix(count, std::vector<bool>(count, false));
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < count; ++j) {
      int can = 0;
      if (i == j) {
        matrix[i][j] = true;
      } else if (cudaDeviceCanAccessPeer(&can, i, j) == cudaSuccess) {
        matrix[i][j] = can != 0;
      } else {
        cudaGetLastError();
      }
    }
  }
  const char* configured = std::getenv("TESSERA_PEER_ACCESS");
  const char* nccl_p2p_disable = std::getenv("NCCL_P2P_DISABLE");
  std::vector<std::vector<bool>> result = peer_access_as_configured(matrix, configured, nccl_p2p_disable);
  if (result != matrix) {
    log_info("{}: the GPUs are taken to have no peer access",
             configured != nullptr && *configured != '\0' ? fmt::format("TESSERA_PEER_ACCESS={}", configured)
                                                          : fmt::format("NCCL_P2P_DISABLE={}", nccl_p2p_disable));
  }
  return result;
}

}  // namespace tessera::comm
