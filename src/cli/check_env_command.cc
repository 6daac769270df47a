// `tessera check_env`: what this machine offers and what tessera would do on
// it — OS, CPU, memory, the GPUs (compute capability, memory), the driver's,
// CUDA's and NCCL's versions, the peer-access matrix, and the backend, dtype
// and communicator `serve` would choose.
//
// The driver and NCCL are asked through dlopen, so this works (and says what
// is missing) on a machine or a build without them.
#include <dlfcn.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdlib>

#include <fstream>
#include <string>
#include <thread>

#include "backend/backend.h"
#include "cli/commands.h"
#include "comm/comm_plan.h"
#include "comm/nccl_communicator.h"
#include "core/error.h"
#include "core/dtype.h"
#include "engine/memory_plan.h"

namespace tessera::cli {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string os_name() {
  std::ifstream in("/etc/os-release");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "unknown";
}

std::string version_string(int v, int major_div) {
  return fmt::format("{}.{}", v / major_div, (v % major_div) / 10);
}

// The CUDA driver API, looked up at run time. Each member is null when absent.
struct CudaDriver {
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  using GetInt = int (*)(int*);
  using DeviceGet = int (*)(int*, int);
  using CanAccessPeer = int (*)(int*, int, int);
  using Init = int (*)(unsigned);
  GetInt driver_version = lib ? reinterpret_cast<GetInt>(dlsym(lib, "cuDriverGetVersion")) : nullptr;
  Init init = lib ? reinterpret_cast<Init>(dlsym(lib, "cuInit")) : nullptr;
  DeviceGet device_get = lib ? reinterpret_cast<DeviceGet>(dlsym(lib, "cuDeviceGet")) : nullptr;
  CanAccessPeer can_access_peer = lib ? reinterpret_cast<CanAccessPeer>(dlsym(lib, "cuDeviceCanAccessPeer")) : nullptr;
  ~CudaDriver() {
    if (lib) dlclose(lib);
  }
};

std::string nccl_version() {
  void* lib = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
  if (!lib) return "not found (libnccl.so.2)";
  using GetVersion = int (*)(int*);
  auto get = reinterpret_cast<GetVersion>(dlsym(lib, "ncclGetVersion"));
  int v = 0;
  std::string out = "unknown";
  if (get && get(&v) == 0) out = fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
  dlclose(lib);
  return out;
}

std::string driver_release() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..."
  size_t module = line.find("Module");
  if (module == std::string::npos) return "";
  std::string rest = line.substr(module + 6);
  size_t begin = rest.find_first_not_of(' ');
  return begin == std::string::npos ? "" : rest.substr(begin, rest.find(' ', begin) - begin);
}

int run_check_env() {
  utsname u{};
  uname(&u);
  fmt::print("tessera         0.1.0\n");
  fmt::print("OS              {} ({} {} {})\n", os_name(), u.sysname, u.release, u.machine);
  fmt::print("CPU             {} ({} logical cores)\n", cpu_model(), std::thread::hardware_concurrency());
  fmt::print("memory          {:.1f} GiB available\n", engine::host_available_memory() / double(1 << 30));

  CudaDriver driver;
  int driver_version = 0;
  if (driver.driver_version) driver.driver_version(&driver_version);
  const std::string release = driver_release();
  fmt::print("NVIDIA driver   {}\n", release.empty() ? (driver.lib ? "loaded (release unknown)" : "not found") : release);
  fmt::print("CUDA (driver)   {}\n", driver_version ? version_string(driver_version, 1000) : "not available");
  fmt::print("NCCL            {}\n", nccl_version());
  fmt::print("FlashInfer      {}\n", backend::flashinfer_prefill_built()
                                        ? "sm_90a prefill attention in this build"
                                        : "not in this build (scripts/fetch_flashinfer.sh, then rebuild with "
                                          "architecture 90, for Hopper's prefill attention)");

  const int gpus = backend::cuda_device_count();
  fmt::print("GPUs            {}{}\n", gpus, gpus == 0 ? " (none usable by this build)" : "");
  std::vector<std::vector<bool>> peer_access(gpus, std::vector<bool>(gpus, false));
  for (int i = 0; i < gpus; ++i) peer_access[i][i] = true;
  for (int i = 0; i < gpus; ++i) {
    backend::CudaDeviceInfo info = backend::cuda_device_info(i);
    fmt::print("  cuda:{}  {}  compute {}.{}  {:.1f} GiB total, {:.1f} GiB free  {}\n", i, info.name, info.compute_major,
               info.compute_minor, info.total_memory / double(1 << 30), info.free_memory / double(1 << 30),
               info.supports_bf16() ? "bf16" : "no bf16 (fp16)");
    fmt::print("          kernels: {}\n", info.describe_image());
  }
  if (gpus > 1 && driver.init && driver.device_get && driver.can_access_peer && driver.init(0) == 0) {
    fmt::print("peer access     (row can access column)\n        ");
    for (int j = 0; j < gpus; ++j) fmt::print("{:>6}", fmt::format("{}", j));
    fmt::print("\n");
    for (int i = 0; i < gpus; ++i) {
      fmt::print("  {:>4}  ", i);
      for (int j = 0; j < gpus; ++j) {
        int a = 0, b = 0, ok = 0;
        if (i != j && driver.device_get(&a, i) == 0 && driver.device_get(&b, j) == 0) driver.can_access_peer(&ok, a, b);
        if (i != j) peer_access[i][j] = ok != 0;
        fmt::print("{:>6}", i == j ? "-" : (ok ? "yes" : "no"));
      }
      fmt::print("\n");
    }
  } else if (gpus > 1) {
    fmt::print("peer access     unknown (the driver API is not available)\n");
  }
  {
    const char* configured = std::getenv("TESSERA_PEER_ACCESS");
    const char* nccl_p2p_disable = std::getenv("NCCL_P2P_DISABLE");
    const auto as_configured = comm::peer_access_as_configured(peer_access, configured, nccl_p2p_disable);
    if (as_configured != peer_access) {
      fmt::print("                {}: taken as none\n",
                 configured != nullptr && *configured != '\0' ? fmt::format("TESSERA_PEER_ACCESS={}", configured)
                                                              : fmt::format("NCCL_P2P_DISABLE={}", nccl_p2p_disable));
    }
    peer_access = as_configured;
  }

  fmt::print("\ntessera would use\n");
  if (gpus > 0) {
    DType dtype = backend::choose_compute_dtype("auto", Device::cuda(0));
    fmt::print("  backend       turbomind (CUDA) on cuda:0\n");
    fmt::print("  dtype         {}\n", dtype_name(dtype));
    const backend::CudaDeviceInfo first = backend::cuda_device_info(0);
    std::string prefill = first.effective_capability() >= 80 ? "tessera's tensor-core kernel" : "tessera's scalar kernel";
    if (first.device_capability() == 90 && backend::flashinfer_prefill_built() && dtype == DType::kBF16) {
      prefill = "FlashInfer's sm_90a kernel (head_dim 128 without a sliding window; others: tessera's tensor-core kernel)";
    }
    fmt::print("  prefill attn  {}\n", prefill);
    // What --tp over every visible GPU would use, and with the switches.
    auto describe = [&](bool same_device, bool disable_custom, int nnodes = 1) {
      comm::CommRequest request;
      request.world_size = (gpus > 1 || !same_device ? gpus : 2) * nnodes;
      request.nnodes = nnodes;
      request.on_gpu = true;
      request.visible_gpus = gpus;
      request.same_device = same_device;
      request.disable_custom_all_reduce = disable_custom;
      request.nccl_available = comm::nccl_available();
      request.peer_access = peer_access;
      try {
        comm::CommPlan plan = comm::choose_comm(request);
        return fmt::format("{} ({})", comm::comm_kind_name(plan.kind), plan.reason);
      } catch (const Error& e) {
        return fmt::format("refused: {}", e.message());
      }
    };
    const int same_device_tp = gpus > 1 ? gpus : 2;
    fmt::print("  communicator  --tp {}: {}\n", gpus, gpus == 1 ? "none (one GPU)" : describe(false, false));
    if (gpus > 1) fmt::print("                with --disable-custom-all-reduce: {}\n", describe(false, true));
    fmt::print("                TESSERA_TP_SAME_DEVICE=1 --tp {}: {}\n", same_device_tp, describe(true, false));
    fmt::print("                --nnodes 2 --tp {}: {}\n", 2 * gpus, describe(false, false, 2));
  } else {
    fmt::print("  backend       cpu\n  dtype         float32\n");
    fmt::print("  communicator  none (one rank); --tp N: thread (CPU ranks in this process); --nnodes N: tcp "
               "(every collective through rank 0)\n");
  }
  return 0;
}

}  // namespace

void add_check_env_command(CLI::App& app, Runner& runner) {
  CLI::App* cmd = app.add_subcommand("check_env", "Report the OS, CPU, GPUs, driver, CUDA, NCCL and tessera's choices");
  cmd->callback([&runner] { runner = [] { return run_check_env(); }; });
}

}  // namespace tessera::cli
