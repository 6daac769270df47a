// Checkpoint: every tensor of a model directory, by its checkpoint name.
//
// Files are memory-mapped; a tensor is a view into the mapping (no copy until
// the model converts it to its compute dtype). Formats, tried in this order:
//   model.safetensors.index.json (sharded safetensors), model.safetensors,
//   *.safetensors (any other single file), pytorch_model.bin.index.json,
//   pytorch_model.bin (the zip archive torch.save writes; read by a restricted
//   unpickler that executes nothing).
// Every offset, shape and dtype is validated against the file before a tensor
// is handed out; a bad file gives Error(kInvalidArgument) naming file and tensor.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tessera::model {

struct CheckpointTensor {
  Tensor tensor;     // a CPU view into the mapped file
  std::string file;  // the file it came from (for error messages)
};

class Checkpoint {
 public:
  // Opens every weight file of `dir` (see the order above).
  static Checkpoint open(const std::filesystem::path& dir);

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws Error(kInvalidArgument) naming the tensor and the directory if absent.
  const CheckpointTensor& get(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::filesystem::path& dir() const { return dir_; }

  // Used by the format readers.
  void add(const std::string& name, CheckpointTensor tensor);

 private:
  std::filesystem::path dir_;
  std::map<std::string, CheckpointTensor> tensors_;
};

}  // namespace tessera::model
