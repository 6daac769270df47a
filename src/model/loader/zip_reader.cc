#include "model/loader/zip_reader.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tessera::model {

namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr size_t kEndSize = 22;  // End Of Central Directory, without its comment
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kZip64EndSize = 56;       // without its extensible data
constexpr size_t kCentralHeaderSize = 46;  // without name, extra field, comment
constexpr size_t kLocalHeaderSize = 30;    // without name, extra field
constexpr uint16_t kZip64ExtraId = 0x0001;

// Bounds-checked little-endian reads over the mapped file. Every read names
// the file when it would leave it, so a corrupt archive never reads wild.
class Reader {
 public:
  explicit Reader(const MappedFile& file) : file_(file) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} is not a valid zip archive: {}", file_.path().string(), what),
                "the file is corrupt or truncated; re-download it, or convert the checkpoint to safetensors");
  }

  void require(uint64_t offset, uint64_t length, const char* what) const {
    if (offset > file_.size() || length > file_.size() - offset) {
      fail(fmt::format("{} at offset {} ({} bytes) runs past the end of the {} byte file", what, offset, length,
                       file_.size()));
    }
  }

  uint64_t le(uint64_t offset, int bytes) const {
    require(offset, bytes, "a field");
    uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; --i) value = value << 8 | static_cast<uint8_t>(file_.data()[offset + i]);
    return value;
  }
  uint16_t u16(uint64_t offset) const { return static_cast<uint16_t>(le(offset, 2)); }
  uint32_t u32(uint64_t offset) const { return static_cast<uint32_t>(le(offset, 4)); }
  uint64_t u64(uint64_t offset) const { return le(offset, 8); }

  std::string text(uint64_t offset, uint64_t length) const {
    require(offset, length, "a name");
    return std::string(reinterpret_cast<const char*>(file_.data()) + offset, length);
  }

  const MappedFile& file() const { return file_; }

 private:
  const MappedFile& file_;
};

struct Directory {
  uint64_t offset;
  uint64_t size;
  uint64_t entries;
};

// The EOCD sits at the end, followed only by a comment of up to 64 KiB, so
// the search backwards is bounded; the last match wins, as in Python's zipfile.
uint64_t find_end_record(const Reader& in) {
  const uint64_t size = in.file().size();
  if (size < kEndSize) in.fail(fmt::format("the file is only {} bytes", size));
  const uint64_t lowest = size - kEndSize > 0xffff ? size - kEndSize - 0xffff : 0;
  for (uint64_t offset = size - kEndSize + 1; offset-- > lowest;) {
    if (in.u32(offset) == kEndSignature && offset + kEndSize + in.u16(offset + 20) <= size) return offset;
  }
  in.fail("no end of central directory record");
}

Directory read_directory_location(const Reader& in) {
  const uint64_t end = find_end_record(in);
  Directory dir{in.u32(end + 16), in.u32(end + 12), in.u16(end + 10)};
  if (in.u16(end + 4) != 0 || in.u16(end + 6) != 0 || in.u16(end + 8) != in.u16(end + 10)) {
    in.fail("multi-part archives are not supported");
  }
  const bool needs_zip64 = dir.offset == 0xffffffff || dir.size == 0xffffffff || dir.entries == 0xffff;
  if (end >= kZip64LocatorSize && in.u32(end - kZip64LocatorSize) == kZip64LocatorSignature) {
    const uint64_t record = in.u64(end - kZip64LocatorSize + 8);
    in.require(record, kZip64EndSize, "the zip64 end of central directory");
    if (in.u32(record) != kZip64EndSignature) in.fail("the zip64 locator points at no zip64 record");
    if (in.u32(record + 16) != 0 || in.u32(record + 20) != 0 || in.u64(record + 24) != in.u64(record + 32)) {
      in.fail("multi-part archives are not supported");
    }
    dir = Directory{in.u64(record + 48), in.u64(record + 40), in.u64(record + 32)};
  } else if (needs_zip64) {
    in.fail("the end record needs zip64 values, but there is no zip64 locator");
  }
  in.require(dir.offset, dir.size, "the central directory");
  // Each entry takes at least one fixed header; this bounds the loop below.
  if (dir.entries > dir.size / kCentralHeaderSize) {
    in.fail(fmt::format("{} entries cannot fit in a {} byte central directory", dir.entries, dir.size));
  }
  return dir;
}

// ZIP64 moves a 32-bit field whose value is 0xffffffff into the extra field,
// in a fixed order: uncompressed size, compressed size, local header offset.
void apply_zip64_extra(const Reader& in, uint64_t extra, uint64_t extra_size, uint64_t* size, uint64_t* compressed_size,
                       uint64_t* local_offset, const std::string& name) {
  const bool want_size = *size == 0xffffffff;
  const bool want_compressed = *compressed_size == 0xffffffff;
  const bool want_offset = *local_offset == 0xffffffff;
  if (!want_size && !want_compressed && !want_offset) return;
  for (uint64_t at = extra; at + 4 <= extra + extra_size;) {
    const uint16_t id = in.u16(at);
    const uint16_t length = in.u16(at + 2);
    if (at + 4 + length > extra + extra_size) break;
    if (id == kZip64ExtraId) {
      uint64_t field = at + 4;
      const uint64_t field_end = field + length;
      auto take = [&](uint64_t* value) {
        if (field + 8 > field_end) in.fail(fmt::format("entry '{}' has a short zip64 extra field", name));
        *value = in.u64(field);
        field += 8;
      };
      if (want_size) take(size);
      if (want_compressed) take(compressed_size);
      if (want_offset) take(local_offset);
      return;
    }
    at += 4 + length;
  }
  in.fail(fmt::format("entry '{}' needs a zip64 extra field and has none", name));
}

}  // namespace

ZipArchive::ZipArchive(std::shared_ptr<MappedFile> file) : file_(std::move(file)) {
  const Reader in(*file_);
  const Directory dir = read_directory_location(in);
  entries_.reserve(dir.entries);
  uint64_t at = dir.offset;
  for (uint64_t i = 0; i < dir.entries; ++i) {
    if (at + kCentralHeaderSize > dir.offset + dir.size) in.fail("the central directory is truncated");
    if (in.u32(at) != kCentralHeaderSignature) in.fail(fmt::format("bad central directory header at offset {}", at));
    ZipEntry entry;
    entry.flags = in.u16(at + 8);
    entry.method = in.u16(at + 10);
    entry.compressed_size = in.u32(at + 20);
    entry.size = in.u32(at + 24);
    const uint16_t name_size = in.u16(at + 28);
    const uint16_t extra_size = in.u16(at + 30);
    const uint16_t comment_size = in.u16(at + 32);
    uint64_t local = in.u32(at + 42);
    const uint64_t next = at + kCentralHeaderSize + name_size + extra_size + comment_size;
    if (next > dir.offset + dir.size) in.fail("the central directory is truncated");
    entry.name = in.text(at + kCentralHeaderSize, name_size);
    apply_zip64_extra(in, at + kCentralHeaderSize + name_size, extra_size, &entry.size, &entry.compressed_size, &local,
                      entry.name);

    // The local header repeats the name but may carry a different extra field
    // (torch pads it so data starts 64-byte aligned): its sizes decide.
    in.require(local, kLocalHeaderSize, "a local file header");
    if (in.u32(local) != kLocalHeaderSignature) {
      in.fail(fmt::format("entry '{}' points at offset {}, where there is no local file header", entry.name, local));
    }
    const uint64_t local_name_size = in.u16(local + 26);
    const uint64_t local_extra_size = in.u16(local + 28);
    if (in.text(local + kLocalHeaderSize, local_name_size) != entry.name) {
      in.fail(fmt::format("entry '{}' has a different name in its local header", entry.name));
    }
    entry.data_offset = local + kLocalHeaderSize + local_name_size + local_extra_size;
    in.require(entry.data_offset, entry.compressed_size, ("the data of entry '" + entry.name + "'").c_str());
    if (!index_.emplace(entry.name, entries_.size()).second) {
      in.fail(fmt::format("entry '{}' appears twice", entry.name));
    }
    entries_.push_back(std::move(entry));
    at = next;
  }
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

std::span<const std::byte> ZipArchive::stored_data(const ZipEntry& entry) const {
  if (entry.flags & 1) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: zip entry '{}' is encrypted", file_->path().string(), entry.name),
                "tessera reads only unencrypted checkpoints");
  }
  if (entry.method != 0 || entry.compressed_size != entry.size) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{}: zip entry '{}' is compressed (method {}); tessera maps tensors straight from the file "
                            "and reads only stored (uncompressed) entries",
                            file_->path().string(), entry.name, entry.method),
                "torch.save never compresses; re-save the checkpoint with torch.save, or convert it to safetensors");
  }
  return {file_->data() + entry.data_offset, entry.size};
}

}  // namespace tessera::model
