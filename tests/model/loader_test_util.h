// Helpers for the checkpoint loader tests: temporary model directories and
// hand-written safetensors / ZIP bytes, so every test builds its own input
// (including broken and hostile ones) without Python or torch.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace tessera::testing {

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera_loader_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

inline void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

template <typename T>
std::string raw_bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// u64 little-endian header length, the JSON header, the data section.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out;
  put_le(out, header.size(), 8);
  return out + header + data;
}

// Replaces the one occurrence of `from` in `text` (fails the test otherwise).
inline std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "pattern not found";
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << "pattern found twice";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

struct ZipInput {
  std::string name;
  std::string data;
  uint16_t method = 0;  // stored; 8 claims deflate (the bytes are left as they are)
};

inline uint32_t crc32(const std::string& data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// A ZIP archive as torch.save writes it: each local header padded with an
// extra field so data starts 64-byte aligned. `zip64` stores sizes and offsets
// in ZIP64 extra fields and adds the ZIP64 end records, as large checkpoints do.
inline std::string zip_bytes(const std::vector<ZipInput>& files, bool zip64 = false) {
  std::string out, central;
  for (const ZipInput& f : files) {
    const uint64_t local = out.size();
    const uint32_t crc = crc32(f.data);
    const size_t unpadded = out.size() + 30 + f.name.size() + 4;
    const size_t padding = (64 - unpadded % 64) % 64;
    put_le(out, 0x04034b50, 4);
    put_le(out, zip64 ? 45 : 20, 2);
    put_le(out, 0, 2);
    put_le(out, f.method, 2);
    put_le(out, 0, 4);  // time, date
    put_le(out, crc, 4);
    put_le(out, f.data.size(), 4);
    put_le(out, f.data.size(), 4);
    put_le(out, f.name.size(), 2);
    put_le(out, 4 + padding, 2);
    out += f.name;
    put_le(out, 0x4246, 2);  // "FB", torch's padding field
    put_le(out, padding, 2);
    out.append(padding, 'Z');
    out += f.data;

    std::string extra;
    if (zip64) {
      put_le(extra, 0x0001, 2);
      put_le(extra, 24, 2);
      put_le(extra, f.data.size(), 8);
      put_le(extra, f.data.size(), 8);
      put_le(extra, local, 8);
    }
    put_le(central, 0x02014b50, 4);
    put_le(central, zip64 ? 45 : 20, 2);
    put_le(central, zip64 ? 45 : 20, 2);
    put_le(central, 0, 2);
    put_le(central, f.method, 2);
    put_le(central, 0, 4);
    put_le(central, crc, 4);
    put_le(central, zip64 ? 0xffffffff : f.data.size(), 4);
    put_le(central, zip64 ? 0xffffffff : f.data.size(), 4);
    put_le(central, f.name.size(), 2);
    put_le(central, extra.size(), 2);
    put_le(central, 0, 2);  // comment
    put_le(central, 0, 2);  // disk
    put_le(central, 0, 2);  // internal attributes
    put_le(central, 0, 4);  // external attributes
    put_le(central, zip64 ? 0xffffffff : local, 4);
    central += f.name + extra;
  }
  const uint64_t central_offset = out.size();
  out += central;
  if (zip64) {
    const uint64_t record = out.size();
    put_le(out, 0x06064b50, 4);
    put_le(out, 44, 8);
    put_le(out, 45, 2);
    put_le(out, 45, 2);
    put_le(out, 0, 4);
    put_le(out, 0, 4);
    put_le(out, files.size(), 8);
    put_le(out, files.size(), 8);
    put_le(out, central.size(), 8);
    put_le(out, central_offset, 8);
    put_le(out, 0x07064b50, 4);
    put_le(out, 0, 4);
    put_le(out, record, 8);
    put_le(out, 1, 4);
  }
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 4);  // disk numbers
  put_le(out, zip64 ? 0xffff : files.size(), 2);
  put_le(out, zip64 ? 0xffff : files.size(), 2);
  put_le(out, zip64 ? 0xffffffff : central.size(), 4);
  put_le(out, zip64 ? 0xffffffff : central_offset, 4);
  put_le(out, 0, 2);
  return out;
}

// Runs `action`, which must throw tessera::Error of `kind` whose message
// contains every string of `needles` (file names, tensor names, ...).
template <typename Action>
void expect_error(Action&& action, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    action();
    ADD_FAILURE() << "expected an Error(" << error_kind_name(kind) << "), but nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(e.message().find(needle), std::string::npos) << "message lacks '" << needle << "': " << e.what();
    }
    EXPECT_FALSE(e.hint().empty()) << "no hint: " << e.what();
  }
}

}  // namespace tessera::testing
