// Where memory lives and kernels run: the host, or one CUDA device by index.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device cpu() { return {DeviceType::kCpu, 0}; }
  static Device cuda(int index) { return {DeviceType::kCuda, index}; }

  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;  // "cpu", "cuda:1"
};

// Parses "cpu", "cuda", "cuda:N" (as --device takes them). Throws Error(kInvalidArgument).
Device parse_device(std::string_view text);

}  // namespace tessera
