#include "model/convert/safetensors_writer.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera::model {

static const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF64: return "F64";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI4: case DType::kU4: break;
  }
  throw Error(ErrorKind::kUnsupported, std::string("safetensors has no dtype for ") + dtype_name(dtype));
}

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  size_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    TESSERA_CHECK(tensor.contiguous() && tensor.device().is_cpu());
    header[name] = {{"dtype", safetensors_dtype(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot write {}", path.string()));
  const uint64_t header_size = text.size();
  out.write(reinterpret_cast<const char*>(&header_size), sizeof(header_size));  // little-endian hosts only
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, tensor] : tensors) {
    out.write(static_cast<const char*>(tensor.raw_data()), static_cast<std::streamsize>(tensor.nbytes()));
  }
  if (!out) throw Error(ErrorKind::kInvalidArgument, fmt::format("writing {} failed (disk full?)", path.string()));
}

}  // namespace tessera::model
