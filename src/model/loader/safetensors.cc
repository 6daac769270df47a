#include "model/loader/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/error.h"

namespace tessera::model {

namespace {

// The reference implementation caps headers at 100 MB; a larger value means a
// corrupt or hostile file, not a model with that many tensors.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr const char* kBadFileHint = "the file is corrupt or truncated; re-download it or re-export the checkpoint";

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;  // [begin, end) within the data section
  uint64_t end;
};

[[noreturn]] void fail(const MappedFile& file, const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: {}", file.path().string(), what), kBadFileHint);
}

[[noreturn]] void fail_tensor(const MappedFile& file, const std::string& tensor, const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: tensor '{}': {}", file.path().string(), tensor, what),
              kBadFileHint);
}

uint64_t read_u64_le(const std::byte* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = value << 8 | static_cast<uint8_t>(p[i]);
  return value;
}

Entry parse_entry(const MappedFile& file, const std::string& name, const nlohmann::json& info) {
  if (!info.is_object()) fail_tensor(file, name, "header entry is not an object");
  Entry entry{name, DType::kF32, {}, 0, 0};

  auto dtype = info.find("dtype");
  if (dtype == info.end() || !dtype->is_string()) fail_tensor(file, name, "missing \"dtype\" string");
  const std::string& dtype_text = dtype->get_ref<const std::string&>();
  if (!dtype_from_safetensors(dtype_text, &entry.dtype)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: tensor '{}' has dtype '{}', which tessera does not read", file.path().string(), name,
                            dtype_text),
                "supported dtypes: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3");
  }

  auto shape = info.find("shape");
  if (shape == info.end() || !shape->is_array()) fail_tensor(file, name, "missing \"shape\" array");
  uint64_t numel = 1;
  for (const auto& dim : *shape) {
    // nlohmann parses every non-negative integer as unsigned; negatives and floats are not.
    if (!dim.is_number_unsigned()) {
      fail_tensor(file, name, fmt::format("shape {} is not a list of non-negative integers", shape->dump()));
    }
    uint64_t d = dim.get<uint64_t>();
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(numel, d, &numel)) {
      fail_tensor(file, name, fmt::format("shape {} has more elements than can exist", shape->dump()));
    }
    entry.shape.push_back(static_cast<int64_t>(d));
  }
  uint64_t expected_bytes = 0;
  if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_bits(entry.dtype) / 8), &expected_bytes)) {
    fail_tensor(file, name, fmt::format("shape {} has more bytes than can exist", shape->dump()));
  }

  auto offsets = info.find("data_offsets");
  if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    fail_tensor(file, name, "\"data_offsets\" must be two non-negative integers [begin, end]");
  }
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  if (entry.begin > entry.end) {
    fail_tensor(file, name, fmt::format("data_offsets [{}, {}] end before they begin", entry.begin, entry.end));
  }
  if (entry.end - entry.begin != expected_bytes) {
    fail_tensor(file, name,
                fmt::format("data_offsets [{}, {}] hold {} bytes, but {} {} needs {} bytes", entry.begin, entry.end,
                            entry.end - entry.begin, dtype_text, shape->dump(), expected_bytes));
  }
  return entry;
}

// Sorted by begin, a tensor overlaps another exactly when it starts before the
// previous non-empty one ends. Empty tensors occupy no bytes and never overlap.
void check_no_overlap(const MappedFile& file, std::vector<const Entry*> entries) {
  std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  const Entry* previous = nullptr;
  for (const Entry* entry : entries) {
    if (entry->begin == entry->end) continue;
    if (previous != nullptr && entry->begin < previous->end) {
      throw Error(
          ErrorKind::kInvalidArgument,
          fmt::format("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data section", file.path().string(),
                      previous->name, previous->begin, previous->end, entry->name, entry->begin, entry->end),
          kBadFileHint);
    }
    previous = entry;
  }
}

}  // namespace

TensorMap read_safetensors(const std::shared_ptr<MappedFile>& file) {
  const MappedFile& f = *file;
  if (f.size() < 8) fail(f, fmt::format("file is {} bytes, too short for a safetensors header", f.size()));
  const uint64_t header_bytes = read_u64_le(f.data());
  if (header_bytes > kMaxHeaderBytes) {
    fail(f, fmt::format("header length {} is larger than the {} byte limit", header_bytes, kMaxHeaderBytes));
  }
  if (header_bytes > f.size() - 8) {
    fail(f, fmt::format("header length {} runs past the end of the {} byte file", header_bytes, f.size()));
  }
  const char* header_text = reinterpret_cast<const char*>(f.data()) + 8;
  nlohmann::json header;
  // nlohmann keeps the last of two equal keys; a tensor named twice is a
  // corrupt file, so the parse callback catches it before it is lost.
  std::string duplicate;
  std::set<std::string> seen;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second &&
        duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  try {
    header = nlohmann::json::parse(header_text, header_text + header_bytes, on_event);
  } catch (const nlohmann::json::exception& e) {
    fail(f, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!duplicate.empty()) fail_tensor(f, duplicate, "named twice in the header");
  if (!header.is_object()) fail(f, "header is not a JSON object");

  const uint64_t data_start = 8 + header_bytes;
  const uint64_t data_bytes = f.size() - data_start;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;  // free-form strings; nothing tessera needs
    Entry entry = parse_entry(f, name, info);
    if (entry.end > data_bytes) {
      fail_tensor(
          f, name,
          fmt::format("data_offsets [{}, {}] run past the {} byte data section", entry.begin, entry.end, data_bytes));
    }
    entries.push_back(std::move(entry));
  }
  std::vector<const Entry*> pointers;
  for (const Entry& entry : entries) pointers.push_back(&entry);
  check_no_overlap(f, std::move(pointers));

  // One buffer per tensor, sized exactly, so no view can reach past its tensor.
  TensorMap tensors;
  for (Entry& entry : entries) {
    const std::byte* data = f.data() == nullptr ? nullptr : f.data() + data_start + entry.begin;
    auto buffer = Buffer::wrap(data, entry.end - entry.begin, Device::cpu(), file);
    tensors.emplace(entry.name, Tensor(std::move(buffer), 0, entry.dtype, std::move(entry.shape)));
  }
  return tensors;
}

}  // namespace tessera::model
