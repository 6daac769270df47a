// `tessera bench allreduce`: all-reduce latency and bus bandwidth against the
// message size, for every communicator this machine can run at --tp ranks:
// thread (CPU ranks), tcp (CPU ranks as if each were a node of its own, over
// loopback: what --nnodes costs per collective), and on GPUs nccl and the custom one-shot and two-shot
// kernels (one GPU per rank), or with --same-device the same kernels with
// every rank on cuda:0. Bus bandwidth is nccl-tests' definition: bytes ×
// 2(n−1)/n ÷ time, what each rank's link carries in a ring. The physical
// limit, measured in the same run, is a copy between the first two ranks'
// devices (peer copy; a copy within cuda:0 for same-device; memcpy on the CPU).
#include <fmt/format.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "backend/backend.h"
#include "cli/commands.h"
#include "comm/comm_group.h"
#include "comm/comm_plan.h"
#include "comm/nccl_communicator.h"
#include "comm/tcp_rendezvous.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct AllReduceArgs {
  int tp = 2;
  bool same_device = false;
  std::string dtype = "bfloat16";
  int64_t min_bytes = int64_t{8} << 10;
  int64_t max_bytes = int64_t{64} << 20;
  int step = 4;  // size multiplier between rows: 2 or 4
  int iterations = 50;
  std::string only;  // one backend by name, or all
};

struct Candidate {
  std::string name;  // the table's label
  comm::CommPlan plan;
  comm::AllReduceAlgorithm algorithm = comm::AllReduceAlgorithm::kAuto;
  int64_t max_bytes = 0;  // sizes beyond are not this backend's (custom: kCustomMaxBytes)
};

DType parse_dtype(const std::string& name) {
  if (name == "float32") return DType::kF32;
  if (name == "float16") return DType::kF16;
  if (name == "bfloat16") return DType::kBF16;
  throw Error(ErrorKind::kInvalidArgument, "--dtype " + name, "use float32, float16 or bfloat16");
}

bool on_cpu(const comm::CommPlan& plan) {
  return plan.kind == comm::CommKind::kThread || plan.kind == comm::CommKind::kTcp;
}

std::unique_ptr<backend::Backend> make_backend(const comm::CommPlan& plan, int rank, DType dtype) {
  return on_cpu(plan) ? backend::make_cpu_backend() : backend::make_cuda_backend(plan.devices[rank], dtype);
}

// tp ranks, each a node of its own, met over loopback: rank r's tcp link.
std::vector<std::unique_ptr<comm::TcpCommunicator>> loopback_links(int tp) {
  comm::TcpListener listener(0);
  std::vector<comm::Rendezvous> nodes(tp);
  std::vector<std::string> errors(tp);
  std::vector<std::thread> threads;
  for (int node = 0; node < tp; ++node) {
    threads.emplace_back([&, node] {
      try {
        comm::RendezvousOptions o;
        o.master_port = listener.port();
        o.nnodes = o.world_size = tp;
        o.node_rank = node;
        o.timeout = o.comm_timeout = std::chrono::seconds(120);
        nodes[node] = comm::rendezvous(o, node == 0 ? &listener : nullptr);
      } catch (const std::exception& e) {
        errors[node] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::unique_ptr<comm::TcpCommunicator>> links;
  for (int node = 0; node < tp; ++node) {
    if (!errors[node].empty()) throw Error(ErrorKind::kCommFailure, fmt::format("tcp node {}: {}", node, errors[node]));
    links.push_back(std::move(nodes[node].links.at(0)));
  }
  return links;
}

// Seconds per all-reduce for each size, on rank 0's clock, every rank in step.
std::vector<double> time_all_reduce(const Candidate& c, int tp, DType dtype, const std::vector<int64_t>& sizes,
                                    int iterations) {
  comm::CommGroupOptions options;
  options.timeout = std::chrono::seconds(120);
  options.algorithm = c.algorithm;
  const bool tcp = c.plan.kind == comm::CommKind::kTcp;
  std::shared_ptr<comm::CommGroup> group = tcp ? nullptr : comm::make_comm_group(c.plan, tp, options);
  std::vector<std::unique_ptr<comm::TcpCommunicator>> links = tcp ? loopback_links(tp) : decltype(links){};
  std::vector<double> seconds(sizes.size(), 0.0);
  std::vector<std::string> errors(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<backend::Backend> backend;
      std::unique_ptr<comm::Communicator> communicator;
      try {
        backend = make_backend(c.plan, r, dtype);
        if (tcp) {
          communicator = std::move(links[r]);
        } else {
          communicator = group->make_rank(r, backend->stream_handle());
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
          if (sizes[i] > c.max_bytes) continue;
          const int64_t count = sizes[i] / static_cast<int64_t>(dtype_bytes(dtype, 1));
          Tensor data = Tensor::empty({count}, dtype, backend->allocator());
          backend->copy(Tensor::empty({count}, dtype, backend->allocator()), data);  // touch the pages
          // Large CPU messages take long: fewer repetitions, at least three.
          const int repeats = std::max<int64_t>(3, std::min<int64_t>(iterations, (int64_t{1} << 30) / sizes[i]));
          for (int w = 0; w < 3; ++w) communicator->all_reduce_sum(data);
          backend->synchronize();
          communicator->barrier();
          backend->synchronize();
          const auto start = Clock::now();
          for (int k = 0; k < repeats; ++k) communicator->all_reduce_sum(data);
          backend->synchronize();
          if (r == 0) seconds[i] = std::chrono::duration<double>(Clock::now() - start).count() / repeats;
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (communicator) {
          communicator->abort(e.what());
        } else if (group) {
          group->abort(r, e.what());
        }
      }
      communicator.reset();
      backend.reset();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < tp; ++r) {
    if (!errors[r].empty()) throw Error(ErrorKind::kCommFailure, fmt::format("{} rank {}: {}", c.name, r, errors[r]));
  }
  return seconds;
}

// Bytes per second of a copy from the first rank's device to the second's
// (read + write counted once each: what a link moves one way).
double measure_limit(const comm::CommPlan& plan, int tp, DType dtype, std::string& what) {
  const bool gpu = !on_cpu(plan);
  const int64_t bytes = gpu ? (int64_t{1} << 30) : (int64_t{256} << 20);
  auto a_backend = make_backend(plan, 0, dtype);
  auto b_backend = tp > 1 && gpu && plan.devices[1] != plan.devices[0] ? make_backend(plan, 1, dtype) : nullptr;
  Tensor a = Tensor::empty({bytes}, DType::kU8, a_backend->allocator());
  Tensor b = Tensor::empty({bytes}, DType::kU8, (b_backend ? *b_backend : *a_backend).allocator());
  what = !gpu ? "memcpy on the CPU"
              : b_backend ? fmt::format("peer copy cuda:{} -> cuda:{}", plan.devices[0], plan.devices[1])
                          : fmt::format("copy within cuda:{}", plan.devices[0]);
  a_backend->copy(a, b);
  a_backend->synchronize();
  const int repeats = gpu ? 10 : 3;
  const auto start = Clock::now();
  for (int i = 0; i < repeats; ++i) a_backend->copy(a, b);
  a_backend->synchronize();
  return static_cast<double>(bytes) * repeats / std::chrono::duration<double>(Clock::now() - start).count();
}

std::string size_name(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{} MB", bytes >> 20);
  return fmt::format("{} KB", bytes >> 10);
}

int run_bench_allreduce(const AllReduceArgs& a) {
  if (a.tp < 1 || a.tp > 8) throw Error(ErrorKind::kInvalidArgument, fmt::format("--tp {}", a.tp), "use 1 to 8");
  if (a.min_bytes < 16 || a.max_bytes < a.min_bytes) {
    throw Error(ErrorKind::kInvalidArgument, "--min-bytes must be at least 16 and at most --max-bytes");
  }
  const DType dtype = parse_dtype(a.dtype);
  std::vector<int64_t> sizes;
  for (int64_t s = a.min_bytes; s <= a.max_bytes; s *= a.step) sizes.push_back(s);

  // thread: CPU ranks; with GPUs, the communicators that fit them.
  std::vector<Candidate> candidates;
  comm::CommPlan thread_plan;
  candidates.push_back({"thread", thread_plan, comm::AllReduceAlgorithm::kAuto, a.max_bytes});
  if (a.tp > 1) {
    comm::CommPlan tcp_plan{comm::CommKind::kTcp, {}, "loopback"};
    candidates.push_back({"tcp", tcp_plan, comm::AllReduceAlgorithm::kAuto, a.max_bytes});
  }
  const int gpus = backend::cuda_device_count();
  std::vector<std::string> skipped;
  if (gpus == 0) {
    skipped.push_back("GPU backends: no CUDA device visible");
  } else if (a.same_device) {
    comm::CommPlan plan{comm::CommKind::kSameDevice, std::vector<int>(a.tp, 0), "same device"};
    candidates.push_back({"same-device one-shot", plan, comm::AllReduceAlgorithm::kOneShot, a.max_bytes});
    candidates.push_back({"same-device two-shot", plan, comm::AllReduceAlgorithm::kTwoShot, a.max_bytes});
  } else if (gpus < a.tp) {
    skipped.push_back(fmt::format("GPU backends: --tp {} needs {} GPUs, {} visible (try --same-device)", a.tp, a.tp, gpus));
  } else {
    comm::CommPlan plan;
    for (int r = 0; r < a.tp; ++r) plan.devices.push_back(r);
    if (comm::nccl_available()) {
      plan.kind = comm::CommKind::kNccl;
      candidates.push_back({"nccl", plan, comm::AllReduceAlgorithm::kAuto, a.max_bytes});
    } else {
      skipped.push_back("nccl: this build has no NCCL");
    }
    if (a.tp > 1 && comm::every_pair_has_peer_access(plan.devices, comm::query_peer_access())) {
      plan.kind = comm::CommKind::kCustom;
      const auto custom_max = static_cast<int64_t>(comm::kCustomMaxBytes);
      candidates.push_back({"custom one-shot", plan, comm::AllReduceAlgorithm::kOneShot, custom_max});
      candidates.push_back({"custom two-shot", plan, comm::AllReduceAlgorithm::kTwoShot, custom_max});
    } else if (a.tp > 1) {
      skipped.push_back("custom: not every pair of GPUs has peer access");
    }
  }
  if (!a.only.empty()) {
    std::erase_if(candidates, [&](const Candidate& c) { return c.name.rfind(a.only, 0) != 0; });
    if (candidates.empty()) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--only {}: no such backend here", a.only),
                  "thread, tcp, nccl, custom, same-device (those this machine can run)");
    }
  }

  fmt::print("all-reduce, --tp {}, {}, up to {} repetitions per size (bus bandwidth = bytes x 2(n-1)/n / time)\n",
             a.tp, dtype_name(dtype), a.iterations);
  for (const auto& s : skipped) fmt::print("skipped: {}\n", s);
  std::vector<std::vector<double>> results;
  std::vector<std::pair<std::string, double>> limits;
  for (const auto& c : candidates) {
    log_info("bench allreduce: {}", c.name);
    results.push_back(time_all_reduce(c, a.tp, dtype, sizes, a.iterations));
    std::string what;
    const double limit = measure_limit(c.plan, a.tp, dtype, what);
    limits.emplace_back(what, limit);
  }
  fmt::print("limits measured in this run:\n");
  for (size_t i = 0; i < candidates.size(); ++i) {
    fmt::print("  {:<22} {} = {:.1f} GB/s\n", candidates[i].name, limits[i].first, limits[i].second / 1e9);
  }
  fmt::print("\n{:>8}", "size");
  for (const auto& c : candidates) fmt::print(" | {:^26}", c.name);
  fmt::print("\n{:>8}", "");
  for (size_t i = 0; i < candidates.size(); ++i) fmt::print(" | {:>9} {:>8} {:>7}", "us", "busGB/s", "limit%");
  fmt::print("\n");
  const double factor = a.tp > 1 ? 2.0 * (a.tp - 1) / a.tp : 1.0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    fmt::print("{:>8}", size_name(sizes[s]));
    for (size_t i = 0; i < candidates.size(); ++i) {
      const double t = results[i][s];
      if (t <= 0.0) {
        fmt::print(" | {:>9} {:>8} {:>7}", "-", "-", "-");
        continue;
      }
      const double bus = static_cast<double>(sizes[s]) * factor / t;
      fmt::print(" | {:>9.1f} {:>8.2f} {:>6.1f}%", t * 1e6, bus / 1e9, 100.0 * bus / limits[i].second);
    }
    fmt::print("\n");
  }
  return 0;
}

}  // namespace

void add_bench_allreduce_command(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<AllReduceArgs>();
  CLI::App* bench = app.get_subcommand("bench");
  CLI::App* cmd = bench->add_subcommand("allreduce", "All-reduce latency and bus bandwidth per message size and communicator");
  cmd->add_option("--tp", args->tp, "ranks")->capture_default_str()->check(CLI::Range(1, 8));
  cmd->add_flag("--same-device", args->same_device, "every rank on cuda:0 (the same-device test mode)");
  cmd->add_option("--dtype", args->dtype, "float32, float16 or bfloat16")
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "float16", "bfloat16"}));
  cmd->add_option("--min-bytes", args->min_bytes, "smallest message")->capture_default_str();
  cmd->add_option("--max-bytes", args->max_bytes, "largest message")->capture_default_str();
  cmd->add_option("--step", args->step, "size multiplier between rows")->capture_default_str()->check(CLI::IsMember({2, 4}));
  cmd->add_option("--iterations", args->iterations, "timed all-reduces per size (fewer for large CPU messages)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--only", args->only, "one backend: thread, nccl, custom, same-device (a prefix of its name)");
  cmd->callback([&runner, args] { runner = [args] { return run_bench_allreduce(*args); }; });
}

}  // namespace tessera::cli
