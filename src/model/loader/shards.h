// Loading a checkpoint made of one file or of shards listed by a weight index.
//
// Both formats tessera reads (safetensors, torch's pytorch_model.bin) shard the
// same way: `<name>.index.json` holds {"weight_map": {tensor: file}}. The code
// that checks the index and opens each shard once lives here; a format only
// supplies a FileReader that turns one mapped file into named tensors.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/loader/checkpoint.h"
#include "model/loader/mapped_file.h"

namespace tessera::model {

// Tensors of one file by checkpoint name; each is a CPU view into the mapping
// and keeps the MappedFile alive.
using TensorMap = std::map<std::string, Tensor>;
using FileReader = TensorMap (*)(const std::shared_ptr<MappedFile>& file);

// Shard file (relative to the index's directory) -> the tensors the index
// assigns to it. Throws Error(kInvalidArgument) naming the index when it is not
// valid JSON, has no weight_map object, or names a file outside the directory.
std::map<std::string, std::vector<std::string>> read_weight_index(const std::filesystem::path& index_path);

// Adds every tensor of `path` to `checkpoint`.
void load_single_file(const std::filesystem::path& path, FileReader read_file, Checkpoint& checkpoint);

// Opens each shard named by the index once, checks that every tensor the index
// lists is in its file, and adds all tensors of all shards to `checkpoint`.
void load_sharded(const std::filesystem::path& index_path, FileReader read_file, Checkpoint& checkpoint);

}  // namespace tessera::model
