#include "model/shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/arch/architecture.h"

namespace tessera::model {

namespace {

struct RowRange {
  int64_t begin = 0;
  int64_t count = 0;
};

// Rows of `full` ([rows, ...] or [rows]) in order, as one new tensor of
// `total_rows` rows; rows past the given ranges are zero.
Tensor take_rows(const Tensor& full, const std::vector<RowRange>& ranges, int64_t total_rows) {
  Shape shape = full.shape();
  shape[0] = total_rows;
  Tensor out = Tensor::empty(shape, full.dtype());
  const size_t row_bytes = full.nbytes() / static_cast<size_t>(full.dim(0));
  char* destination = static_cast<char*>(out.raw_data());
  for (const RowRange& r : ranges) {
    TESSERA_CHECK(r.begin >= 0 && r.begin + r.count <= full.dim(0));
    std::memcpy(destination, static_cast<const char*>(full.raw_data()) + r.begin * row_bytes, r.count * row_bytes);
    destination += r.count * row_bytes;
  }
  return out;
}

// Columns [begin, begin + count) of a 2-D tensor.
Tensor take_columns(const Tensor& full, int64_t begin, int64_t count) {
  TESSERA_CHECK(full.rank() == 2 && begin >= 0 && begin + count <= full.dim(1));
  Tensor out = Tensor::empty({full.dim(0), count}, full.dtype());
  const size_t element = dtype_bytes(full.dtype(), 1);
  for (int64_t row = 0; row < full.dim(0); ++row) {
    std::memcpy(static_cast<char*>(out.raw_data()) + row * count * element,
                static_cast<const char*>(full.raw_data()) + (row * full.dim(1) + begin) * element, count * element);
  }
  return out;
}

}  // namespace

std::vector<int> valid_tp_sizes(const ModelSpec& spec) {
  std::vector<int> sizes = {1};
  if (spec.num_kv_heads <= 0) return sizes;
  for (int64_t tp = 2; tp <= spec.num_heads; ++tp) {
    if (spec.num_heads % tp != 0) continue;
    if (spec.num_kv_heads % tp != 0 && tp % spec.num_kv_heads != 0) continue;
    if (spec.intermediate_size < tp) continue;
    if (spec.quantization.kept_four_bit()) {  // row-parallel 4-bit layers split their inputs in whole groups
      const int64_t g = spec.quantization.group_size;
      if ((spec.q_size() / tp) % g != 0 || spec.intermediate_size % (tp * g) != 0) continue;
    }
    sizes.push_back(static_cast<int>(tp));
  }
  return sizes;
}

void check_tp_size(const ModelSpec& spec, int tp) {
  std::vector<int> valid = valid_tp_sizes(spec);
  if (std::find(valid.begin(), valid.end(), tp) != valid.end()) return;
  const std::string groups =
      spec.quantization.kept_four_bit()
          ? fmt::format(" and its 4-bit layers' inputs ({} attention, {} MLP) in whole groups of {}", spec.q_size(),
                        spec.intermediate_size, spec.quantization.group_size)
          : "";
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("--tp {} cannot split this model's {} attention heads ({} KV heads){} evenly", tp,
                          spec.num_heads, spec.num_kv_heads, groups),
              fmt::format("tensor-parallel sizes that work for this model: {}", fmt::join(valid, ", ")));
}

TpShard make_tp_shard(const ModelSpec& spec, int rank, int world_size) {
  TpShard shard;
  if (world_size == 1) {  // the whole model, whatever its shape
    shard.num_heads = spec.num_heads;
    shard.num_kv_heads = spec.num_kv_heads;
    shard.intermediate_size = spec.intermediate_size;
    shard.vocab_rows = spec.vocab_size;
    return shard;
  }
  check_tp_size(spec, world_size);
  TESSERA_CHECK(rank >= 0 && rank < world_size);
  shard.rank = rank;
  shard.world_size = world_size;
  shard.num_heads = spec.num_heads / world_size;
  shard.head_begin = rank * shard.num_heads;
  // KV head of query head h is h / group. With kv_heads >= tp each rank has
  // kv_heads / tp of them; below, its query heads all share one.
  const int64_t group = spec.num_heads / spec.num_kv_heads;
  shard.num_kv_heads = std::max<int64_t>(1, spec.num_kv_heads / world_size);
  shard.kv_head_begin = shard.head_begin / group;
  shard.intermediate_begin = spec.intermediate_size * rank / world_size;
  shard.intermediate_size = spec.intermediate_size * (rank + 1) / world_size - shard.intermediate_begin;
  shard.vocab_rows = (spec.vocab_size + world_size - 1) / world_size;
  shard.vocab_begin = rank * shard.vocab_rows;
  return shard;
}

Tensor shard_weight(const ModelSpec& spec, const TpShard& shard, const std::string& name, const Tensor& full) {
  TESSERA_CHECK(full.defined() && full.contiguous() && full.device().is_cpu());
  if (shard.world_size == 1 || name == "embed") return full;
  const int64_t hd = spec.head_dim;
  // A 4-bit linear's parts (weights.h): rows are output channels, split as
  // 16-bit rows are; a column split counts in packed words (8 inputs) or
  // groups, and must take whole ones (valid_tp_sizes ensures it).
  std::string base = name;
  int64_t unit = 1;  // inputs per column of `full`
  for (const char* suffix : {".qweight", ".scales", ".zeros"}) {
    if (!name.ends_with(suffix)) continue;
    base = name.substr(0, name.size() - std::strlen(suffix));
    const int64_t in = base.ends_with(".o") ? spec.q_size() : base.ends_with(".down") ? spec.intermediate_size
                                                                                         : spec.hidden_size;
    unit = in / full.dim(1);
  }
  auto columns = [&](int64_t begin, int64_t count) {
    if (begin % unit != 0 || count % unit != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: inputs [{}, {}) of rank {} do not fall on whole 4-bit groups of {}", name, begin,
                              begin + count, shard.rank, unit),
                  fmt::format("tensor-parallel sizes that work for this model: {}", fmt::join(valid_tp_sizes(spec), ", ")));
    }
    return take_columns(full, begin / unit, count / unit);
  };
  switch (tp_split_of(base)) {
    case TpSplit::kReplicated:
      return full;
    case TpSplit::kColumnQkv: {
      const int64_t q = spec.q_size(), kv = spec.kv_size();
      const int64_t local_kv = shard.num_kv_heads * hd;
      return take_rows(full,
                       {{shard.head_begin * hd, shard.num_heads * hd},
                        {q + shard.kv_head_begin * hd, local_kv},
                        {q + kv + shard.kv_head_begin * hd, local_kv}},
                       shard.qkv_size(hd));
    }
    case TpSplit::kColumnGateUp:
      return take_rows(full,
                       {{shard.intermediate_begin, shard.intermediate_size},
                        {spec.intermediate_size + shard.intermediate_begin, shard.intermediate_size}},
                       2 * shard.intermediate_size);
    case TpSplit::kRow:
      if (base.ends_with(".o")) return columns(shard.head_begin * hd, shard.num_heads * hd);
      return columns(shard.intermediate_begin, shard.intermediate_size);
    case TpSplit::kVocab: {
      const int64_t rows = std::clamp<int64_t>(spec.vocab_size - shard.vocab_begin, 0, shard.vocab_rows);
      return take_rows(full, {{shard.vocab_begin, rows}}, shard.vocab_rows);
    }
  }
  throw Error(ErrorKind::kInternal, "no tensor-parallel split for weight " + name);
}

}  // namespace tessera::model
