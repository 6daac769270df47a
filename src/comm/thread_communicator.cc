#include "comm/thread_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>

#include "core/error.h"

namespace tessera::comm {

namespace {

enum class Op { kAllReduceSum, kAllGather, kBroadcast, kBarrier };

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduceSum: return "all_reduce_sum";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
    case Op::kBarrier: return "barrier";
  }
  return "?";
}

// What one rank posted for the current collective.
struct Post {
  Op op = Op::kBarrier;
  DType dtype = DType::kF32;
  int64_t count = 0;
  int root = 0;
  const void* input = nullptr;
};

// Elements [begin, end) of `count` that rank `rank` of `world` reduces.
std::pair<int64_t, int64_t> range_of(int64_t count, int world, int rank) {
  return {count * rank / world, count * (rank + 1) / world};
}

void check_host_tensor(const Tensor& t, const char* op, const char* what) {
  if (!t.defined() || !t.device().is_cpu() || !t.contiguous()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("thread communicator {}: the {} must be a defined, contiguous host tensor (got {})", op,
                            what, t.defined() ? t.describe() : "an undefined tensor"));
  }
}

}  // namespace

// The state the ranks of one group share. Every member is guarded by mutex_.
class ThreadGroup {
 public:
  ThreadGroup(int world_size, std::chrono::milliseconds timeout)
      : world_size_(world_size), timeout_(timeout), posts_(world_size), arrived_(world_size, false) {}

  int world_size() const { return world_size_; }

  // Rendezvous of every rank; `on_complete` runs (under the lock) in the last
  // rank to arrive, before anyone is released.
  template <typename F>
  void sync(int rank, const char* what, F&& on_complete) {
    std::unique_lock lock(mutex_);
    throw_if_failed(rank);
    const uint64_t generation = generation_;
    arrived_[rank] = true;
    if (++num_arrived_ == world_size_) {
      on_complete();
      num_arrived_ = 0;
      std::fill(arrived_.begin(), arrived_.end(), false);
      ++generation_;
      released_.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    bool released = released_.wait_until(lock, deadline, [&] { return generation_ != generation || failure_; });
    if (generation_ != generation) return;  // completed (a later failure shows at the next call)
    if (!released) {
      std::vector<int> missing;
      for (int r = 0; r < world_size_; ++r) {
        if (!arrived_[r]) missing.push_back(r);
      }
      failure_ = fmt::format("rank {} waited {} ms in {} for rank(s) {}, which did not arrive", rank, timeout_.count(),
                             what, fmt::join(missing, ", "));
      released_.notify_all();
    }
    throw_if_failed(rank);
  }
  void sync(int rank, const char* what) {
    sync(rank, what, [] {});
  }

  void abort(int rank, const std::string& reason) noexcept {
    try {
      std::lock_guard lock(mutex_);
      if (!failure_) failure_ = fmt::format("rank {} aborted the group: {}", rank, reason);
      released_.notify_all();
    } catch (...) {
      // Only allocation can throw here; the group then times out instead.
    }
  }

  // Posts rank's part of a collective and waits for every rank's. Every rank
  // then checks that all posts agree, so a mismatch fails all ranks alike.
  void post_and_sync(int rank, const Post& post) {
    {
      std::lock_guard lock(mutex_);
      posts_[rank] = post;
    }
    sync(rank, op_name(post.op), [&] {
      const Post& first = posts_[0];
      for (int r = 1; r < world_size_; ++r) {
        const Post& p = posts_[r];
        if (p.op != first.op || p.dtype != first.dtype || p.count != first.count || p.root != first.root) {
          failure_ = fmt::format(
              "collectives do not match: rank 0 called {} ({} x {}, root {}), rank {} called {} ({} x {}, root {})",
              op_name(first.op), first.count, dtype_name(first.dtype), first.root, r, op_name(p.op), p.count,
              dtype_name(p.dtype), p.root);
          return;
        }
      }
      if (first.op == Op::kAllReduceSum) {
        if (first.dtype == DType::kI32) {
          int_sum_.resize(first.count);
        } else {
          float_sum_.resize(first.count);
        }
      }
    });
    std::lock_guard lock(mutex_);
    throw_if_failed(rank);
  }

  // Posted tensors and the shared sum are read between the two rendezvous of a
  // collective without the lock: each is written by one rank only, and the
  // rendezvous order the accesses.
  const Post& post(int rank) const { return posts_[rank]; }
  std::vector<float>& float_sum() { return float_sum_; }
  std::vector<int64_t>& int_sum() { return int_sum_; }

 private:
  void throw_if_failed(int rank) const {
    if (failure_) {
      throw Error(ErrorKind::kCommFailure, fmt::format("thread communicator, rank {}: {}", rank, *failure_),
                  "a failed group stays failed; the group has to be built again");
    }
  }

  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable released_;
  std::vector<Post> posts_;
  std::vector<bool> arrived_;
  int num_arrived_ = 0;
  uint64_t generation_ = 0;
  std::optional<std::string> failure_;
  std::vector<float> float_sum_;
  std::vector<int64_t> int_sum_;
};

namespace {

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  std::string backend_name() const override { return "thread"; }

  void all_reduce_sum(Tensor& data) override {
    check_host_tensor(data, "all_reduce_sum", "tensor");
    const DType dtype = data.dtype();
    if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16 && dtype != DType::kI32) {
      throw Error(ErrorKind::kUnsupported,
                  fmt::format("thread communicator all_reduce_sum: dtype {} (f32, f16, bf16 and i32 are summed)",
                              dtype_name(dtype)));
    }
    const int64_t count = data.numel();
    group_->post_and_sync(rank_, {Op::kAllReduceSum, dtype, count, 0, data.raw_data()});
    const int world = world_size();
    auto [begin, end] = range_of(count, world, rank_);
    const size_t element = dtype_bytes(dtype, 1);
    if (dtype == DType::kI32) {
      int64_t* sum = group_->int_sum().data();
      std::fill(sum + begin, sum + end, 0);
      for (int r = 0; r < world; ++r) {
        const auto* in = static_cast<const int32_t*>(group_->post(r).input);
        for (int64_t i = begin; i < end; ++i) sum[i] += in[i];
      }
    } else {
      float* sum = group_->float_sum().data();
      std::vector<float> converted(end - begin);
      std::fill(sum + begin, sum + end, 0.0f);
      for (int r = 0; r < world; ++r) {
        const auto* in = static_cast<const char*>(group_->post(r).input) + begin * element;
        convert_to_f32(dtype, in, converted.data(), converted.size());
        for (int64_t i = begin; i < end; ++i) sum[i] += converted[i - begin];
      }
    }
    group_->sync(rank_, "all_reduce_sum");
    if (dtype == DType::kI32) {
      const int64_t* sum = group_->int_sum().data();
      auto* out = data.data<int32_t>();
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(sum[i]);
    } else {
      convert_from_f32(group_->float_sum().data(), dtype, data.raw_data(), static_cast<size_t>(count));
    }
  }

  void all_gather(const Tensor& input, Tensor& output) override {
    check_host_tensor(input, "all_gather", "input");
    check_host_tensor(output, "all_gather", "output");
    const int world = world_size();
    if (output.dtype() != input.dtype() || output.numel() != world * input.numel()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("thread communicator all_gather: output {} must be {} elements of {} ({} ranks x {})",
                              output.describe(), world * input.numel(), dtype_name(input.dtype()), world,
                              input.numel()));
    }
    group_->post_and_sync(rank_, {Op::kAllGather, input.dtype(), input.numel(), 0, input.raw_data()});
    const size_t bytes = input.nbytes();
    for (int r = 0; r < world; ++r) {
      std::memcpy(static_cast<char*>(output.raw_data()) + r * bytes, group_->post(r).input, bytes);
    }
    group_->sync(rank_, "all_gather");
  }

  void broadcast(Tensor& data, int root) override {
    check_host_tensor(data, "broadcast", "tensor");
    if (root < 0 || root >= world_size()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("thread communicator broadcast: root {} is not a rank of {}", root, world_size()));
    }
    group_->post_and_sync(rank_, {Op::kBroadcast, data.dtype(), data.numel(), root, data.raw_data()});
    if (rank_ != root) std::memcpy(data.raw_data(), group_->post(root).input, data.nbytes());
    group_->sync(rank_, "broadcast");
  }

  void barrier() override { group_->post_and_sync(rank_, {Op::kBarrier, DType::kF32, 0, 0, nullptr}); }

  void abort(const std::string& reason) noexcept override { group_->abort(rank_, reason); }

 private:
  std::shared_ptr<ThreadGroup> group_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int world_size, const ThreadCommOptions& options) {
  if (world_size < 1) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("a group needs at least one rank, not {}", world_size));
  }
  auto group = std::make_shared<ThreadGroup>(world_size, options.timeout);
  std::vector<std::unique_ptr<Communicator>> communicators;
  for (int r = 0; r < world_size; ++r) communicators.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return communicators;
}

}  // namespace tessera::comm
