#include "backend/backend.h"

#include "core/error.h"

namespace tessera::backend {

// A backend without device graphs: the model never calls these there (it asks
// supports_graphs() first).
void Backend::begin_capture() {
  throw Error(ErrorKind::kInternal, "this backend records no device graphs");
}

std::unique_ptr<DeviceGraph> Backend::end_capture() {
  throw Error(ErrorKind::kInternal, "this backend records no device graphs");
}

}  // namespace tessera::backend
