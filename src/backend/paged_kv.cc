#include "backend/paged_kv.h"

namespace tessera::backend {

const char* kv_cache_format_name(KvCacheFormat format) {
  return format == KvCacheFormat::kInt8 ? "int8" : "compute dtype";
}

size_t PagedKvCache::block_bytes() const {
  size_t per_layer = 0;
  for (const PagedKvLayer& layer : layers) {
    per_layer += layer.keys.nbytes() + layer.values.nbytes();
    if (layer.quantized()) per_layer += layer.key_params.nbytes() + layer.value_params.nbytes();
  }
  return num_blocks == 0 ? 0 : per_layer / static_cast<size_t>(num_blocks);
}

}  // namespace tessera::backend
