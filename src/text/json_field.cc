#include "text/json_field.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tessera::text {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot open {}", path.string()));
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} is not valid JSON: {}", path.string(), e.what()),
                "the file may be truncated; download it again");
  }
}

std::string JsonField::where() const { return field_.empty() ? file_ : fmt::format("{}: {}", file_, field_); }

JsonField JsonField::child(const nlohmann::json& value, std::string_view name, bool is_index) const {
  std::string field = is_index || field_.empty() ? field_ : field_ + ".";
  field += is_index ? fmt::format("[{}]", name) : std::string(name);
  return JsonField(value, file_, std::move(field));
}

JsonField JsonField::member(const nlohmann::json& value, std::string_view key) const {
  return child(value, fmt::format("\"{}\"", key), true);
}

JsonField JsonField::at(std::string_view key) const {
  if (!value_->is_object()) fail("expected a JSON object");
  const auto it = value_->find(key);
  if (it == value_->end()) fail(fmt::format("missing field \"{}\"", key));
  return child(*it, key, false);
}

std::optional<JsonField> JsonField::find(std::string_view key) const {
  if (!value_->is_object()) fail("expected a JSON object");
  const auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return child(*it, key, false);
}

JsonField JsonField::at(size_t index) const {
  if (!value_->is_array()) fail("expected a JSON array");
  if (index >= value_->size()) fail(fmt::format("index {} past the end of the array", index));
  return child((*value_)[index], std::to_string(index), true);
}

size_t JsonField::array_size() const {
  if (!value_->is_array()) fail("expected a JSON array");
  return value_->size();
}

std::string JsonField::as_string() const {
  if (!value_->is_string()) fail(fmt::format("expected a string, found {}", value_->type_name()));
  return value_->get<std::string>();
}

int64_t JsonField::as_int() const {
  if (!value_->is_number_integer()) fail(fmt::format("expected an integer, found {}", value_->type_name()));
  if (value_->is_number_unsigned() && value_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail("integer out of range");
  return value_->get<int64_t>();
}

bool JsonField::as_bool() const {
  if (!value_->is_boolean()) fail(fmt::format("expected true or false, found {}", value_->type_name()));
  return value_->get<bool>();
}

std::string JsonField::string_or(std::string_view key, std::string_view fallback) const {
  const auto field = find(key);
  return field ? field->as_string() : std::string(fallback);
}

bool JsonField::bool_or(std::string_view key, bool fallback) const {
  const auto field = find(key);
  return field ? field->as_bool() : fallback;
}

void JsonField::fail(std::string_view problem) const {
  throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: {}", where(), problem));
}

void JsonField::unsupported(std::string_view component, std::string_view type) const {
  throw Error(ErrorKind::kUnsupported,
              fmt::format("{}: {} of type \"{}\" is not supported yet", where(), component, type),
              "tessera's tokenizer implements the SentencePiece-style BPE pipeline of Llama 2 so far");
}

}  // namespace tessera::text
