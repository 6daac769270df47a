// pytorch_model.bin: the ZIP archive torch.save has written since PyTorch 1.6.
//
//   <archive>/data.pkl          the state dict, pickled (protocol 2 by default)
//   <archive>/data/<key>        one entry per storage, stored uncompressed
//   <archive>/byteorder         "little" (newer torch), <archive>/version, ...
//
// data.pkl names each storage by a persistent id
//   ('storage', torch.FloatStorage, '<key>', 'cpu', <numel>)
// and each tensor by torch._utils._rebuild_tensor_v2(storage, offset, size,
// stride, requires_grad, backward_hooks). It is read by a restricted
// unpickler (pickle_reader.h) that allows only those names and
// collections.OrderedDict, and executes nothing.
#pragma once

#include <memory>

#include "model/loader/mapped_file.h"
#include "model/loader/shards.h"

namespace tessera::model {

// Every tensor of the state dict in `file`, as views into its storages.
// Throws Error(kInvalidArgument) naming the file (and tensor) for a bad
// archive or pickle, a compressed storage, a non-contiguous or out-of-range
// tensor, and for any pickled reference to code outside the allow-list
// (os.system, builtins.eval, ...); Error(kUnsupported) for the legacy
// pre-1.6 format and big-endian archives.
TensorMap read_pytorch_bin(const std::shared_ptr<MappedFile>& file);

}  // namespace tessera::model
