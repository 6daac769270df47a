#include "model/loader/mapped_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tessera::model {

namespace {

// Closes the descriptor on every path out of open(): the mapping outlives it.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void throw_open_failure(const std::filesystem::path& path, const char* what, int err) {
  throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot {} {}: {}", what, path.string(), std::strerror(err)),
              "check that the file exists and is readable");
}

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_open_failure(path, "open", errno);
  FdCloser closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_open_failure(path, "stat", errno);
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} is not a regular file", path.string()),
                "point tessera at the model directory's weight files");
  }
  auto size = static_cast<size_t>(st.st_size);
  // mmap of length 0 fails with EINVAL; an empty file is simply an empty view.
  if (size == 0) return std::shared_ptr<MappedFile>(new MappedFile(path, nullptr, 0));

  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (data == MAP_FAILED) throw_open_failure(path, "memory-map", errno);
  return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<const std::byte*>(data), size));
}

MappedFile::MappedFile(std::filesystem::path path, const std::byte* data, size_t size)
    : path_(std::move(path)), data_(data), size_(size) {}

MappedFile::~MappedFile() {
  // munmap only fails on arguments we never pass; nothing to report from a destructor.
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace tessera::model
