#include "backend/paged_kv.h"

namespace tessera::backend {

size_t PagedKvCache::block_bytes() const {
  size_t per_layer = 0;
  for (const PagedKvLayer& layer : layers) {
    per_layer += layer.keys.nbytes() + layer.values.nbytes();
  }
  return num_blocks == 0 ? 0 : per_layer / static_cast<size_t>(num_blocks);
}

}  // namespace tessera::backend
