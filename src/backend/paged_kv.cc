#include "backend/paged_kv.h"

namespace tessera::backend {

const char* kv_cache_format_name(KvCacheFormat format) {
  switch (format) {
    case KvCacheFormat::kInt8: return "int8";
    case KvCacheFormat::kInt4: return "int4";
    case KvCacheFormat::kCompute: break;
  }
  return "compute dtype";
}

KvCacheFormat kv_cache_format_for_policy(int quant_policy) {
  return quant_policy == 8 ? KvCacheFormat::kInt8 : quant_policy == 4 ? KvCacheFormat::kInt4 : KvCacheFormat::kCompute;
}

int kv_code_bits(KvCacheFormat format) {
  switch (format) {
    case KvCacheFormat::kInt8: return 8;
    case KvCacheFormat::kInt4: return 4;
    case KvCacheFormat::kCompute: break;
  }
  return 0;
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
