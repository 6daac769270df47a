#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace tessera::comm {

namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId::bytes));

using Clock = std::chrono::steady_clock;

[[noreturn]] void throw_nccl(ncclResult_t result, const char* what, ncclComm_t comm) {
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  throw Error(ErrorKind::kCommFailure,
              fmt::format("NCCL {}: {}{}{}", what, ncclGetErrorString(result), last && *last ? ": " : "",
                          last ? last : ""),
              "see NCCL_DEBUG=WARN for NCCL's own log");
}

[[noreturn]] void throw_cuda(cudaError_t error, const char* what) {
  throw Error(ErrorKind::kCommFailure, fmt::format("CUDA {} in the NCCL communicator: {}", what,
                                                   cudaGetErrorString(error)));
}

ncclDataType_t nccl_dtype(DType dtype, const char* op) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
    case DType::kI8: return ncclInt8;
    case DType::kF64: return ncclFloat64;
    default: break;
  }
  throw Error(ErrorKind::kUnsupported, fmt::format("NCCL {}: dtype {} is not supported", op, dtype_name(dtype)));
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const NcclUniqueId& id, int rank, int world_size, int device, void* stream,
                   const NcclCommOptions& options)
      : rank_(rank), world_size_(world_size), device_(device), stream_(static_cast<cudaStream_t>(stream)),
        timeout_(options.timeout), group_abort_(options.group_abort) {
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("NCCL: rank {} of a group of {}", rank, world_size));
    }
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    ncclUniqueId nccl_id;
    std::memcpy(&nccl_id, id.bytes.data(), sizeof(nccl_id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t result = ncclCommInitRankConfig(&comm_, world_size, nccl_id, rank, &config);
    if (result != ncclSuccess && result != ncclInProgress) {
      cudaEventDestroy(done_);
      throw_nccl(result, "ncclCommInitRankConfig", nullptr);
    }
    try {
      wait_ready("initialisation");
    } catch (...) {
      cudaEventDestroy(done_);  // wait_ready aborted the communicator
      throw;
    }
  }

  // A healthy communicator is finalised (within the timeout) and destroyed; a
  // failed one was aborted already. Never throws.
  ~NcclCommunicator() override {
    if (!failed_.load() && group_abort_ && group_abort_->raised()) {
      // A peer failed: finalising would wait for it in vain.
      failed_.store(true);
      ncclCommAbort(comm_);
    }
    if (!failed_.load()) {
      ncclResult_t state = ncclCommFinalize(comm_);
      const auto deadline = Clock::now() + timeout_;
      while (state == ncclInProgress && Clock::now() < deadline) {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
        std::this_thread::yield();
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (scratch_) cudaFree(scratch_);
    cudaEventDestroy(done_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend_name() const override { return "nccl"; }

  void all_reduce_sum(Tensor& data) override {
    check_device_tensor(data, "all_reduce_sum");
    run("all_reduce_sum", [&] {
      return ncclAllReduce(data.raw_data(), data.raw_data(), static_cast<size_t>(data.numel()),
                           nccl_dtype(data.dtype(), "all_reduce_sum"), ncclSum, comm_, stream_);
    });
  }

  void all_gather(const Tensor& input, Tensor& output) override {
    check_device_tensor(input, "all_gather");
    check_device_tensor(output, "all_gather");
    if (output.dtype() != input.dtype() || output.numel() != world_size_ * input.numel()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("NCCL all_gather: output {} must be {} x {} elements of {}", output.describe(),
                              world_size_, input.numel(), dtype_name(input.dtype())));
    }
    run("all_gather", [&] {
      return ncclAllGather(input.raw_data(), output.raw_data(), static_cast<size_t>(input.numel()),
                           nccl_dtype(input.dtype(), "all_gather"), comm_, stream_);
    });
  }

  void broadcast(Tensor& data, int root) override {
    check_device_tensor(data, "broadcast");
    if (root < 0 || root >= world_size_) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("NCCL broadcast: root {} of {} ranks", root, world_size_));
    }
    run("broadcast", [&] {
      return ncclBroadcast(data.raw_data(), data.raw_data(), data.nbytes(), ncclUint8, root, comm_, stream_);
    });
  }

  // An all-reduce of one value: NCCL has no barrier of its own.
  void barrier() override {
    if (!scratch_) check_cuda(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc");
    run("barrier", [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_); });
  }

  // Call from the rank's own thread (as the tensor-parallel executor does):
  // NCCL frees the communicator here.
  void abort(const std::string& reason) noexcept override {
    if (group_abort_) group_abort_->raise(rank_, reason);
    if (comm_ && !failed_.exchange(true)) ncclCommAbort(comm_);
  }

 private:
  void check_cuda(cudaError_t error, const char* what) {
    if (error != cudaSuccess) throw_cuda(error, what);
  }

  void check_device_tensor(const Tensor& t, const char* op) const {
    if (!t.defined() || !t.contiguous() || t.device().is_cpu() || t.device().index != device_) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("NCCL {}: needs a contiguous tensor on cuda:{} (got {})", op, device_,
                              t.defined() ? t.describe() : "an undefined tensor"));
    }
  }

  void throw_if_failed(const char* op) {
    check_group(op);
    if (failed_.load()) {
      throw Error(ErrorKind::kCommFailure, fmt::format("NCCL {}: the communicator has failed and was aborted", op),
                  "a failed group stays failed; the group has to be built again");
    }
  }

  // A peer of the group aborted: abort this rank's communicator too and fail.
  void check_group(const char* what) {
    if (!group_abort_ || !group_abort_->raised()) return;
    if (comm_ && !failed_.exchange(true)) ncclCommAbort(comm_);
    throw Error(ErrorKind::kCommFailure, fmt::format("NCCL {} on rank {}: {}", what, rank_, group_abort_->message()),
                "look for the first error of the group");
  }

  // Polls the communicator until its last call has completed on the host side.
  void wait_ready(const char* what) {
    const auto deadline = Clock::now() + timeout_;
    while (true) {
      check_group(what);
      ncclResult_t state = ncclSuccess;
      ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
      if (result != ncclSuccess) fail(result, what);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(state, what);
      if (Clock::now() > deadline) timed_out(what);
      std::this_thread::yield();
    }
  }

  // Queues a collective, then waits for it on the stream, polling NCCL's
  // asynchronous error, until the timeout.
  template <typename Call>
  void run(const char* what, Call&& call) {
    throw_if_failed(what);
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclResult_t result = call();
    if (result != ncclSuccess && result != ncclInProgress) fail(result, what);
    wait_ready(what);
    check_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord");
    const auto deadline = Clock::now() + timeout_;
    while (true) {
      check_group(what);
      cudaError_t query = cudaEventQuery(done_);
      if (query == cudaSuccess) return;
      if (query != cudaErrorNotReady) throw_cuda(query, what);
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
        fail(state, what);
      }
      if (Clock::now() > deadline) timed_out(what);
      std::this_thread::yield();
    }
  }

  [[noreturn]] void fail(ncclResult_t result, const char* what) {
    std::string last = ncclGetLastError(comm_);
    abort(fmt::format("NCCL {}: {}", what, ncclGetErrorString(result)));
    throw Error(ErrorKind::kCommFailure,
                fmt::format("NCCL {} on rank {}: {}{}{}", what, rank_, ncclGetErrorString(result),
                            last.empty() ? "" : ": ", last),
                "see NCCL_DEBUG=WARN for NCCL's own log");
  }

  [[noreturn]] void timed_out(const char* what) {
    abort(fmt::format("NCCL {} timed out", what));
    throw Error(ErrorKind::kCommFailure,
                fmt::format("NCCL {} on rank {} did not complete within {} ms; the communicator was aborted", what,
                            rank_, timeout_.count()),
                "a rank did not arrive: look for an earlier error on another rank");
  }

  int rank_;
  int world_size_;
  int device_;
  cudaStream_t stream_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* scratch_ = nullptr;
  std::shared_ptr<GroupAbort> group_abort_;
  std::atomic<bool> failed_{false};
};

}  // namespace

bool nccl_available() { return true; }

NcclUniqueId make_nccl_unique_id() {
  ncclUniqueId id;
  ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) throw_nccl(result, "ncclGetUniqueId", nullptr);
  NcclUniqueId out;
  std::memcpy(out.bytes.data(), &id, sizeof(id));
  return out;
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueId& id, int rank, int world_size, int device,
                                                     void* stream, const NcclCommOptions& options) {
  return std::make_unique<NcclCommunicator>(id, rank, world_size, device, stream, options);
}

}  // namespace tessera::comm
