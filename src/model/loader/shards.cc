#include "model/loader/shards.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"

namespace tessera::model {

namespace {

// An index lists one line per tensor; even 100k-tensor models stay far below this.
constexpr size_t kMaxIndexBytes = 64ull << 20;

// Rejects what could make a shard name point outside the model directory.
// Purely lexical on purpose: the Hugging Face cache stores files as symlinks
// into ../../blobs, which must keep working.
void check_shard_path(const std::filesystem::path& index_path, const std::string& tensor, const std::string& file) {
  std::filesystem::path relative(file);
  bool escapes = file.empty() || relative.is_absolute() || relative.has_root_name() || relative.has_root_directory();
  for (const auto& part : relative) {
    if (part == "..") escapes = true;
  }
  if (escapes) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: tensor '{}' maps to file '{}', which is not a file inside the model directory",
                            index_path.string(), tensor, file),
                "shard names in weight_map must be plain relative file names (no '..', no absolute paths)");
  }
}

}  // namespace

std::map<std::string, std::vector<std::string>> read_weight_index(const std::filesystem::path& index_path) {
  auto mapped = MappedFile::open(index_path);
  if (mapped->size() > kMaxIndexBytes) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} is {} bytes, more than the {} bytes a weight index can sensibly hold",
                            index_path.string(), mapped->size(), kMaxIndexBytes),
                "check that the index file is not corrupted");
  }
  const char* text = reinterpret_cast<const char*>(mapped->data());
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text, text + mapped->size());
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} is not valid JSON: {}", index_path.string(), e.what()),
                "re-download the index file; it may be truncated");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} has no \"weight_map\" object", index_path.string()),
                "a weight index looks like {\"weight_map\": {\"tensor.name\": \"model-00001-of-00002.safetensors\"}}");
  }
  std::map<std::string, std::vector<std::string>> files;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}: weight_map entry for tensor '{}' is not a file name", index_path.string(), tensor),
                  "each weight_map value must be a string naming a shard file");
    }
    const std::string& name = file.get_ref<const std::string&>();
    check_shard_path(index_path, tensor, name);
    files[name].push_back(tensor);
  }
  if (files.empty()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} lists no tensors", index_path.string()),
                "check that the index belongs to this model");
  }
  return files;
}

void load_single_file(const std::filesystem::path& path, FileReader read_file, Checkpoint& checkpoint) {
  TensorMap tensors = read_file(MappedFile::open(path));
  for (auto& [name, tensor] : tensors) checkpoint.add(name, {std::move(tensor), path.string()});
}

void load_sharded(const std::filesystem::path& index_path, FileReader read_file, Checkpoint& checkpoint) {
  const std::filesystem::path dir = index_path.parent_path();
  for (const auto& [file, listed] : read_weight_index(index_path)) {
    const std::filesystem::path shard = dir / file;
    std::error_code ec;
    if (!std::filesystem::exists(shard, ec)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{} names shard file {} (for tensor '{}'), which does not exist", index_path.string(),
                              shard.string(), listed.front()),
                  "the download may be incomplete; fetch every file the index lists");
    }
    TensorMap tensors = read_file(MappedFile::open(shard));
    for (const std::string& tensor : listed) {
      if (tensors.count(tensor) == 0) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("tensor '{}' is listed in {} for file {}, but that file does not contain it", tensor,
                                index_path.string(), shard.string()),
                    "the index and the shard files come from different versions; re-download both");
      }
    }
    log_debug("loaded {} tensors from {}", tensors.size(), shard.string());
    for (auto& [name, tensor] : tensors) checkpoint.add(name, {std::move(tensor), shard.string()});
  }
}

}  // namespace tessera::model
