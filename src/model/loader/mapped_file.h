// MappedFile: a read-only memory map of a whole file, unmapped on destruction.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>

namespace tessera::model {

class MappedFile {
 public:
  // Throws Error(kInvalidArgument) naming the path when it cannot be opened.
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile(std::filesystem::path path, const std::byte* data, size_t size);
  std::filesystem::path path_;
  const std::byte* data_;
  size_t size_;
};

}  // namespace tessera::model
