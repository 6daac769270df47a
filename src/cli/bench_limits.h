// The physical limits a benchmark reports against, measured in the same run.
#pragma once

#include "backend/backend.h"

namespace tessera::cli {

// Read + write bytes per second of a device-to-device copy far larger than
// the caches (2 GiB on a GPU, 512 MiB on the CPU), timed by the device's clock.
double measure_copy_bandwidth(backend::Backend& backend);

// FLOP/s of an 8192³ product (1024³ on the CPU) in the compute dtype, on
// random operands: zeros multiply faster than real data and would raise the limit.
double measure_matmul_rate(backend::Backend& backend);

}  // namespace tessera::cli
