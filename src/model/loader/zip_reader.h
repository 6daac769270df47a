// ZipArchive: the central directory of a memory-mapped ZIP file.
//
// Just enough ZIP to read torch.save's archives: the End Of Central Directory
// record (and its ZIP64 variant, which multi-GB checkpoints need), the central
// directory, and each entry's local header to find where its data starts.
// Every offset and size is checked against the file before use. Only STORED
// (uncompressed) entries can be read, because tensors are handed out as views
// into the mapping; torch.save never compresses. CRCs are not verified: that
// would read every byte of a multi-GB file at start-up.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/loader/mapped_file.h"

namespace tessera::model {

struct ZipEntry {
  std::string name;
  uint16_t flags = 0;   // general purpose bits; bit 0 = encrypted
  uint16_t method = 0;  // 0 = stored, 8 = deflate, ...
  uint64_t compressed_size = 0;
  uint64_t size = 0;         // uncompressed
  uint64_t data_offset = 0;  // first byte of the (possibly compressed) data in the file
};

class ZipArchive {
 public:
  // Throws Error(kInvalidArgument) naming the file when it is not a valid ZIP.
  explicit ZipArchive(std::shared_ptr<MappedFile> file);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const MappedFile& file() const { return *file_; }
  // nullptr when there is no entry of that name.
  const ZipEntry* find(std::string_view name) const;
  // The bytes of a stored entry. Throws Error(kInvalidArgument) naming the file
  // and entry when it is compressed or encrypted.
  std::span<const std::byte> stored_data(const ZipEntry& entry) const;

 private:
  std::shared_ptr<MappedFile> file_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in entries_
};

}  // namespace tessera::model
