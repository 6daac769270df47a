#include "model/loader/pytorch_bin.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "model/loader/pickle_reader.h"
#include "model/loader/zip_reader.h"

namespace tessera::model {

namespace {

using Kind = PickleValue::Kind;

constexpr const char* kConvertHint = "convert the checkpoint to safetensors, or re-save it with a recent torch.save";

struct StorageType {
  std::string_view name;  // as pickled: GLOBAL torch.<name>
  DType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", DType::kF32},  {"HalfStorage", DType::kF16}, {"BFloat16Storage", DType::kBF16},
    {"DoubleStorage", DType::kF64}, {"LongStorage", DType::kI64}, {"IntStorage", DType::kI32},
    {"ShortStorage", DType::kI16},  {"CharStorage", DType::kI8},  {"ByteStorage", DType::kU8},
    {"BoolStorage", DType::kBool},
};

// The only callables a state dict needs. Each is interpreted by TorchHooks
// below, never looked up or called.
constexpr std::string_view kCallables[] = {
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
};

const StorageType* find_storage_type(std::string_view global) {
  for (const StorageType& type : kStorageTypes) {
    if (global.size() == 6 + type.name.size() && global.substr(0, 6) == "torch." && global.substr(6) == type.name) {
      return &type;
    }
  }
  return nullptr;
}

// Objects the hooks create; a PickleValue of kind kObject holds the index.
struct TorchObject {
  enum class Type { kStorage, kTensor } type;
  PickleValue* value;  // kStorage: the persistent id tuple; kTensor: the _rebuild_tensor_v2 args
};

class TorchHooks final : public PickleHooks {
 public:
  explicit TorchHooks(std::string file) : file_(std::move(file)) {}

  void check_global(const std::string& module, const std::string& name) override {
    const std::string global = module + "." + name;
    bool allowed = std::find(std::begin(kCallables), std::end(kCallables), global) != std::end(kCallables) ||
                   find_storage_type(global) != nullptr;
    if (!allowed) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("refusing to load {}: pickle references {}; tessera never executes code from model files",
                              file_, global),
                  "this file is not a plain state dict (and may be malicious); use the model's .safetensors files, "
                  "or convert a checkpoint you trust to safetensors");
    }
  }

  PickleValue* persistent_load(PickleValue& pid, Unpickler& unpickler) override {
    if (pid.kind != Kind::kTuple || pid.items.empty() || pid.items[0]->kind != Kind::kString ||
        pid.items[0]->text != "storage") {
      unpickler.fail("a persistent id that is not ('storage', ...)");
    }
    return object(TorchObject::Type::kStorage, &pid, unpickler);
  }

  PickleValue* reduce(const PickleValue& callable, PickleValue& args, Unpickler& unpickler) override {
    if (callable.text == "collections.OrderedDict") {
      if (!args.items.empty()) unpickler.fail("OrderedDict called with arguments");
      return unpickler.make(Kind::kDict);
    }
    if (callable.text == "torch._utils._rebuild_tensor_v2") {
      // (storage, offset, size, stride, requires_grad, backward_hooks[, metadata]),
      // checked in TensorBuilder::build where the tensor's name is known.
      if (args.items.size() != 6 && args.items.size() != 7) {
        unpickler.fail(fmt::format("_rebuild_tensor_v2 called with {} arguments", args.items.size()));
      }
      return object(TorchObject::Type::kTensor, &args, unpickler);
    }
    if (callable.text.starts_with("torch._utils._rebuild_parameter")) {
      // (data, requires_grad, backward_hooks[, state]): a Parameter is its data here.
      if (args.items.empty() || !is(*args.items[0], TorchObject::Type::kTensor)) {
        unpickler.fail("_rebuild_parameter of something that is not a tensor");
      }
      return args.items[0];
    }
    unpickler.fail(fmt::format("{} is not callable here", callable.text));
  }

  void build(PickleValue& object, PickleValue& state, Unpickler& unpickler) override {
    // An OrderedDict from state_dict() carries `_metadata` (module versions) as
    // its state: nothing tessera needs.
    if (object.kind != Kind::kDict) unpickler.fail(fmt::format("BUILD on a {}", pickle_kind_name(object.kind)));
  }

  bool is(const PickleValue& value, TorchObject::Type type) const {
    return value.kind == Kind::kObject && objects_[static_cast<size_t>(value.integer)].type == type;
  }
  PickleValue& object_value(const PickleValue& value) const {
    return *objects_[static_cast<size_t>(value.integer)].value;
  }

 private:
  PickleValue* object(TorchObject::Type type, PickleValue* value, Unpickler& unpickler) {
    PickleValue* handle = unpickler.make(Kind::kObject);
    handle->integer = static_cast<int64_t>(objects_.size());
    objects_.push_back({type, value});
    return handle;
  }

  std::string file_;
  std::vector<TorchObject> objects_;
};

// Builds one tensor view after checking everything the pickle claims against
// the archive. `name` and `file` are for messages.
class TensorBuilder {
 public:
  TensorBuilder(const std::shared_ptr<MappedFile>& file, const ZipArchive& zip, const std::string& prefix,
                const TorchHooks& hooks)
      : file_(file), zip_(zip), prefix_(prefix), hooks_(hooks) {}

  Tensor build(const std::string& name, const PickleValue& value) const {
    if (!hooks_.is(value, TorchObject::Type::kTensor)) {
      fail(name, fmt::format("its value is a Python {}, not a tensor", pickle_kind_name(value.kind)));
    }
    const PickleValue& args = hooks_.object_value(value);
    if (!hooks_.is(*args.items[0], TorchObject::Type::kStorage)) fail(name, "its storage is not a storage");
    const PickleValue& pid = hooks_.object_value(*args.items[0]);
    // ('storage', storage_type, key, location, numel)
    if (pid.items.size() != 5 || pid.items[1]->kind != Kind::kGlobal || pid.items[2]->kind != Kind::kString ||
        pid.items[4]->kind != Kind::kInt) {
      fail(name, "its storage id is not ('storage', type, key, location, numel)");
    }
    const StorageType* type = find_storage_type(pid.items[1]->text);
    if (type == nullptr) fail(name, fmt::format("storage type {} is not a tensor storage", pid.items[1]->text));
    const std::string entry_name = prefix_ + "data/" + pid.items[2]->text;
    const ZipEntry* entry = zip_.find(entry_name);
    if (entry == nullptr) fail(name, fmt::format("its storage '{}' is missing from the archive", entry_name));
    if (entry->method != 0) {
      fail(name, fmt::format("its storage '{}' is compressed (zip method {}); tessera reads only stored entries",
                             entry_name, entry->method));
    }
    std::span<const std::byte> bytes = zip_.stored_data(*entry);
    const uint64_t element_bytes = dtype_bits(type->dtype) / 8;
    const int64_t storage_numel = pid.items[4]->integer;
    if (storage_numel < 0 || static_cast<uint64_t>(storage_numel) > bytes.size() / element_bytes) {
      fail(name, fmt::format("its storage '{}' claims {} elements of {} bytes but holds {} bytes", entry_name,
                             storage_numel, element_bytes, bytes.size()));
    }

    const int64_t offset = int_arg(name, args, 1, "storage offset");
    const Shape shape = ints_arg(name, args, 2, "size");
    const Shape stride = ints_arg(name, args, 3, "stride");
    if (offset < 0) fail(name, fmt::format("storage offset {} is negative", offset));
    if (stride.size() != shape.size()) fail(name, "size and stride have different ranks");
    // Overflow-safe element count, then row-major contiguity; dims of size 1
    // may carry any stride, and an empty tensor has no layout at all.
    uint64_t numel = 1;
    for (int64_t d : shape) {
      if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) {
        fail(name, fmt::format("size {} is not a valid shape", shape_to_string(shape)));
      }
    }
    int64_t expected = 1;
    for (size_t i = shape.size(); numel != 0 && i-- > 0;) {
      if (shape[i] != 1 && stride[i] != expected) {
        fail(name,
             fmt::format("size {} with stride {} is not contiguous row-major", shape_to_string(shape),
                         shape_to_string(stride)),
             "save tensors with .contiguous() before torch.save, or convert the checkpoint to safetensors");
      }
      expected *= shape[i];
    }
    if (numel > static_cast<uint64_t>(storage_numel) || static_cast<uint64_t>(offset) > storage_numel - numel) {
      fail(name, fmt::format("elements [{}, {}+{}) lie outside its storage '{}' of {} elements", offset, offset, numel,
                             entry_name, storage_numel));
    }
    auto buffer = Buffer::wrap(bytes.data() + offset * element_bytes, numel * element_bytes, Device::cpu(), file_);
    return Tensor(std::move(buffer), 0, type->dtype, shape);
  }

  [[noreturn]] void fail(const std::string& name, const std::string& what,
                         const std::string& hint = kConvertHint) const {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: tensor '{}': {}", file_->path().string(), name, what),
                hint);
  }

 private:
  int64_t int_arg(const std::string& name, const PickleValue& args, size_t i, const char* what) const {
    if (args.items[i]->kind != Kind::kInt) fail(name, fmt::format("{} is not an int", what));
    return args.items[i]->integer;
  }
  Shape ints_arg(const std::string& name, const PickleValue& args, size_t i, const char* what) const {
    const PickleValue& tuple = *args.items[i];
    if (tuple.kind != Kind::kTuple) fail(name, fmt::format("{} is not a tuple", what));
    Shape values;
    for (const PickleValue* item : tuple.items) {
      if (item->kind != Kind::kInt) fail(name, fmt::format("{} holds a {}", what, pickle_kind_name(item->kind)));
      values.push_back(item->integer);
    }
    return values;
  }

  const std::shared_ptr<MappedFile>& file_;
  const ZipArchive& zip_;
  const std::string& prefix_;
  const TorchHooks& hooks_;
};

[[noreturn]] void fail_file(const MappedFile& file, ErrorKind kind, const std::string& what, const std::string& hint) {
  throw Error(kind, fmt::format("{}: {}", file.path().string(), what), hint);
}

// "<archive>/" of the one "<archive>/data.pkl" entry.
std::string archive_prefix(const ZipArchive& zip) {
  std::string prefix;
  for (const ZipEntry& entry : zip.entries()) {
    const auto slash = entry.name.find('/');
    if (slash == std::string::npos || entry.name.substr(slash + 1) != "data.pkl") continue;
    if (!prefix.empty())
      fail_file(zip.file(), ErrorKind::kInvalidArgument, "archive holds more than one data.pkl", kConvertHint);
    prefix = entry.name.substr(0, slash + 1);
  }
  if (prefix.empty()) {
    fail_file(zip.file(), ErrorKind::kInvalidArgument,
              "zip archive has no <archive>/data.pkl; it was not written by torch.save", kConvertHint);
  }
  return prefix;
}

}  // namespace

TensorMap read_pytorch_bin(const std::shared_ptr<MappedFile>& file) {
  // torch.save before 1.6 (or with _use_new_zipfile_serialization=False)
  // wrote a bare pickle stream, which starts with the PROTO opcode.
  if (file->size() >= 2 && static_cast<uint8_t>(file->data()[0]) == 0x80) {
    fail_file(*file, ErrorKind::kUnsupported,
              "this is the legacy (pre-1.6) torch.save format, which tessera does not read",
              "re-save it with a recent torch.save, or convert it to safetensors");
  }
  const ZipArchive zip(file);
  const std::string prefix = archive_prefix(zip);
  if (const ZipEntry* order = zip.find(prefix + "byteorder")) {
    auto bytes = zip.stored_data(*order);
    std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (text != "little") {
      fail_file(*file, ErrorKind::kUnsupported,
                fmt::format("storages are in '{}' byte order; tessera reads little-endian only", text),
                "re-save the checkpoint on a little-endian machine, or convert it to safetensors");
    }
  }

  TorchHooks hooks(file->path().string());
  const std::string pickle_name = prefix + "data.pkl";
  Unpickler unpickler(zip.stored_data(*zip.find(pickle_name)),
                      fmt::format("{} ({})", file->path().string(), pickle_name), hooks);
  const PickleValue* root = unpickler.load();
  if (root->kind != Kind::kDict) {
    fail_file(*file, ErrorKind::kInvalidArgument,
              fmt::format("holds a pickled {}, not a state dict of tensors", pickle_kind_name(root->kind)),
              "save model.state_dict(), or convert the checkpoint to safetensors");
  }
  const TensorBuilder builder(file, zip, prefix, hooks);
  TensorMap tensors;
  for (const auto& [key, value] : root->entries) {
    if (key->kind != Kind::kString) {
      fail_file(*file, ErrorKind::kInvalidArgument, fmt::format("state dict has a {} key", pickle_kind_name(key->kind)),
                "save model.state_dict(), whose keys are tensor names");
    }
    if (tensors.count(key->text) != 0) builder.fail(key->text, "appears twice in the state dict");
    tensors.emplace(key->text, builder.build(key->text, *value));
  }
  return tensors;
}

}  // namespace tessera::model
