// JsonField: a value inside a tokenizer file together with where it is
// ("/m/tokenizer.json: normalizer.normalizers[1].type"), so every error about a
// hostile or unexpected file names the file and the field, not just "bad json".
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tessera::text {

// Reads and parses a JSON file. Throws Error(kInvalidArgument) naming the file
// when it cannot be read or parsed.
nlohmann::json read_json_file(const std::filesystem::path& path);

class JsonField {
 public:
  // The root of a document; `file` names it in errors.
  JsonField(const nlohmann::json& value, std::string file) : value_(&value), file_(std::move(file)) {}

  const nlohmann::json& value() const { return *value_; }
  // "file: field.path", or just the file at the root.
  std::string where() const;
  bool is_null() const { return value_->is_null(); }

  // The member `key` of an object; a missing key is an error.
  JsonField at(std::string_view key) const;
  // The member `key`, or nullopt when it is absent or null.
  std::optional<JsonField> find(std::string_view key) const;
  JsonField at(size_t index) const;
  // The value of a member found by iterating an object: field["key"].
  JsonField member(const nlohmann::json& value, std::string_view key) const;
  size_t array_size() const;

  std::string as_string() const;
  int64_t as_int() const;
  bool as_bool() const;

  // Optional members with defaults, for fields HF files often leave out.
  std::string string_or(std::string_view key, std::string_view fallback) const;
  bool bool_or(std::string_view key, bool fallback) const;

  // Throws Error(kInvalidArgument): "<where>: <problem>".
  [[noreturn]] void fail(std::string_view problem) const;
  // Throws Error(kUnsupported) for a valid component tessera does not implement.
  [[noreturn]] void unsupported(std::string_view component, std::string_view type) const;

 private:
  JsonField(const nlohmann::json& value, std::string file, std::string field)
      : value_(&value), file_(std::move(file)), field_(std::move(field)) {}
  JsonField child(const nlohmann::json& value, std::string_view name, bool is_index) const;

  const nlohmann::json* value_;
  std::string file_;
  std::string field_;  // empty at the root
};

}  // namespace tessera::text
