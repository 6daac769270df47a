// safetensors: the format of nearly every Hugging Face checkpoint.
//
// Layout: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [4096, 4096], "data_offsets": [begin, end]},
//    "__metadata__": {...}}
// then the data section; offsets are relative to its start.
#pragma once

#include <memory>

#include "model/loader/mapped_file.h"
#include "model/loader/shards.h"

namespace tessera::model {

// Every tensor of `file` as a view into the mapping, after checking the header
// against the file: known dtype, non-negative shape, byte size equal to
// dtype size x element count, offsets inside the data section, no overlaps.
// Throws Error(kInvalidArgument) naming the file (and tensor) otherwise.
//
// safetensors does not align data offsets, so a tensor's data may be
// unaligned for its type; code that needs aligned data copies it first
// (the model converts every weight to its compute dtype anyway).
TensorMap read_safetensors(const std::shared_ptr<MappedFile>& file);

}  // namespace tessera::model
