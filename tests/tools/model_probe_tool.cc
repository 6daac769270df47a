// tessera_model_probe: what tests/python/test_awq.py compares with numpy.
//   tessera_model_probe weights MODEL_DIR OUT.safetensors
//     every canonical weight (model/weights.h) as f32, 4-bit linears dequantized
//   tessera_model_probe logits MODEL_DIR OUT.safetensors ID ID ...
//     teacher-forced logits [n, vocab] of the ids, one prefill on the CPU
// Errors print as `tessera: error (kind): message` and exit 2.
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/convert/safetensors_writer.h"
#include "model/transformer.h"

using namespace tessera;

namespace {

int dump_weights(const std::string& dir, const std::string& out) {
  const model::HostModel host = model::read_host_model(dir);
  const model::CanonicalWeights weights = model::assemble_weights(host.spec, *host.architecture, *host.checkpoint);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, tensor] : weights) {
    if (name.ends_with(".scales") || name.ends_with(".zeros")) continue;
    if (!name.ends_with(".qweight")) {
      tensors.emplace_back(name, tensor);
      continue;
    }
    const std::string base = name.substr(0, name.size() - 8);
    backend::QuantizedWeight q;
    q.qweight = tensor;
    q.scales = weights.at(base + ".scales");
    q.zeros = weights.at(base + ".zeros");
    q.out_features = tensor.dim(0);
    q.in_features = tensor.dim(1) * 8;
    q.group_size = q.in_features / q.scales.dim(1);
    tensors.emplace_back(base, backend::dequantize_weight(q));
  }
  model::write_safetensors(out, tensors);
  return 0;
}

int dump_logits(const std::string& dir, const std::string& out, const std::vector<int32_t>& ids) {
  auto backend = backend::make_cpu_backend();
  auto model = model::load_transformer(dir, *backend);
  const int64_t block_size = 16, blocks = (static_cast<int64_t>(ids.size()) + block_size - 1) / block_size;
  backend::PagedKvCache cache = model->allocate_cache(blocks, block_size);
  model::ForwardBatch batch;
  batch.token_ids = ids;
  batch.attention.query_start = {0, static_cast<int32_t>(ids.size())};
  batch.attention.max_blocks_per_seq = static_cast<int32_t>(blocks);
  for (int64_t b = 0; b < blocks; ++b) batch.attention.block_tables.push_back(static_cast<int32_t>(b));
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.attention.positions.push_back(static_cast<int32_t>(i));
    batch.logit_rows.push_back(static_cast<int32_t>(i));
  }
  model::write_safetensors(out, {{"logits", model->forward(batch, cache)}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 3 && args[0] == "weights") return dump_weights(args[1], args[2]);
    if (args.size() >= 4 && args[0] == "logits") {
      std::vector<int32_t> ids;
      for (size_t i = 3; i < args.size(); ++i) ids.push_back(std::stoi(args[i]));
      return dump_logits(args[1], args[2], ids);
    }
    std::fprintf(stderr, "usage: tessera_model_probe weights MODEL OUT | logits MODEL OUT ID...\n");
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "tessera: error (%s): %s\n", error_kind_name(e.kind()), e.message().c_str());
    if (!e.hint().empty()) std::fprintf(stderr, "tessera: hint: %s\n", e.hint().c_str());
    return 2;
  }
}
