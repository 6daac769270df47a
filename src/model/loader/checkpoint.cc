#include "model/loader/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "model/loader/pytorch_bin.h"
#include "model/loader/safetensors.h"
#include "model/loader/shards.h"

namespace tessera::model {

namespace {

namespace fs = std::filesystem;

constexpr const char* kLookedFor =
    "model.safetensors.index.json, model.safetensors, *.safetensors, pytorch_model.bin.index.json, "
    "pytorch_model.bin";

// True when `path` names anything, even a dangling symlink: an HF cache whose
// blob is missing then fails on that file, naming it, instead of falling
// through to "no weights found".
bool present(const fs::path& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

// *.safetensors files other than model.safetensors, sorted so messages are stable.
std::vector<fs::path> other_safetensors(const fs::path& dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code entry_ec;  // a dangling symlink is skipped, not a listing failure
    if (it->path().extension() == ".safetensors" && it->is_regular_file(entry_ec)) found.push_back(it->path());
  }
  if (ec) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot list {}: {}", dir.string(), ec.message()),
                "check that the model directory is readable");
  }
  std::sort(found.begin(), found.end());
  return found;
}

// Picks the first format present in the order checkpoint.h documents; never
// mixes two, so a directory holding both safetensors and .bin loads only the
// safetensors. Returns a short description of what was loaded.
std::string load_weights(const fs::path& dir, Checkpoint& checkpoint) {
  if (present(dir / "model.safetensors.index.json")) {
    load_sharded(dir / "model.safetensors.index.json", read_safetensors, checkpoint);
    return "sharded safetensors";
  }
  if (present(dir / "model.safetensors")) {
    load_single_file(dir / "model.safetensors", read_safetensors, checkpoint);
    return "model.safetensors";
  }
  std::vector<fs::path> others = other_safetensors(dir);
  if (others.size() == 1) {
    load_single_file(others.front(), read_safetensors, checkpoint);
    return others.front().filename().string();
  }
  if (others.size() > 1) {
    std::vector<std::string> names;
    for (const auto& path : others) names.push_back(path.filename().string());
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} holds several .safetensors files ({}) but no model.safetensors.index.json, so it is "
                            "not clear which belong to the model",
                            dir.string(), fmt::join(names, ", ")),
                "add the model.safetensors.index.json from the model's repository, or remove the files that are "
                "not part of the model");
  }
  if (present(dir / "pytorch_model.bin.index.json")) {
    load_sharded(dir / "pytorch_model.bin.index.json", read_pytorch_bin, checkpoint);
    return "sharded pytorch_model.bin";
  }
  if (present(dir / "pytorch_model.bin")) {
    load_single_file(dir / "pytorch_model.bin", read_pytorch_bin, checkpoint);
    return "pytorch_model.bin";
  }
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("no model weights found in {}: looked for {}", dir.string(), kLookedFor),
              "pass a Hugging Face model directory (it holds config.json and the weight files); if the download "
              "was interrupted, fetch the weight files again");
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    bool exists = fs::exists(dir, ec);
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("model directory {} {}", dir.string(), exists ? "is not a directory" : "does not exist"),
                "pass the directory that holds config.json and the weight files (e.g. a Hugging Face snapshot)");
  }
  Checkpoint checkpoint;
  checkpoint.dir_ = dir;
  std::string format = load_weights(dir, checkpoint);
  log_info("checkpoint {}: {} tensors from {}", dir.string(), checkpoint.tensors_.size(), format);
  return checkpoint;
}

const CheckpointTensor& Checkpoint::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string examples;
    size_t shown = 0;
    for (auto example = tensors_.begin(); example != tensors_.end() && shown < 3; ++example, ++shown) {
      examples += fmt::format("{}'{}'", shown ? ", " : "", example->first);
    }
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("tensor '{}' not found in the checkpoint at {} ({} tensors{}{})", name, dir_.string(),
                            tensors_.size(), examples.empty() ? "" : ", e.g. ", examples),
                "is this the right model directory, and does config.json name the right architecture?");
  }
  return it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, tensor] : tensors_) names.push_back(name);
  return names;
}

void Checkpoint::add(const std::string& name, CheckpointTensor tensor) {
  // try_emplace leaves `tensor` untouched when the name exists, so the message can use it.
  auto [it, inserted] = tensors_.try_emplace(name, std::move(tensor));
  if (!inserted) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("tensor '{}' appears twice: in {} and in {}", name, it->second.file, tensor.file),
                "the directory mixes files of different checkpoints; keep one set of weight files");
  }
}

}  // namespace tessera::model
