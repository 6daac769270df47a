#include "text/tool_calls.h"

#include <algorithm>
#include <random>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace tessera::text {

namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kInternLMStart = "<|action_start|><|plugin|>";
constexpr std::string_view kInternLMEnd = "<|action_end|>";
constexpr std::string_view kQwenStart = "<tool_call>";
constexpr std::string_view kQwenEnd = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralStart = "[TOOL_CALLS]";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_space(std::string_view text, size_t at) {
  while (at < text.size() && is_space(text[at])) ++at;
  return at;
}

bool starts_at(std::string_view text, size_t at, std::string_view marker) {
  return text.substr(std::min(at, text.size())).starts_with(marker);
}

// The marker a call of `format` opens with, searched anywhere in the text.
std::string_view start_marker(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kInternLM: return kInternLMStart;
    case ToolCallFormat::kQwen: return kQwenStart;
    case ToolCallFormat::kLlama3: return kPythonTag;
    case ToolCallFormat::kMistral: return kMistralStart;
  }
  return {};
}

// Where the first call begins at or after `from`, if one does. Llama 3's bare
// JSON counts only as the whole answer: '{' as its first non-space character.
std::optional<size_t> call_start(ToolCallFormat format, std::string_view text, size_t from) {
  if (format == ToolCallFormat::kLlama3) {
    const size_t first = skip_space(text, 0);
    if (first < text.size() && text[first] == '{' && first >= from) return first;
  }
  const size_t at = text.find(start_marker(format), from);
  if (at == std::string_view::npos) return std::nullopt;
  return at;
}

// The end (one past the closing brace) of the JSON object that opens at
// text[at] == '{', skipping braces inside strings; npos when it does not close.
size_t object_end(std::string_view text, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// The call written as a JSON object at text[at], and the offset after it;
// nullopt unless it is an object with a string "name".
std::optional<std::pair<ToolCall, size_t>> read_call(std::string_view text, size_t at) {
  if (at >= text.size() || text[at] != '{') return std::nullopt;
  const size_t end = object_end(text, at);
  if (end == std::string_view::npos) return std::nullopt;
  Json object;
  try {
    object = Json::parse(text.substr(at, end - at));
  } catch (const Json::exception&) {
    return std::nullopt;
  }
  const auto name = object.find("name");
  if (name == object.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  // InternLM and Llama 3 write "parameters", Qwen "arguments"; either is taken.
  auto arguments = object.find("parameters");
  if (arguments == object.end()) arguments = object.find("arguments");
  if (arguments == object.end() || arguments->is_null()) {
    call.arguments = "{}";
  } else if (arguments->is_string()) {
    call.arguments = arguments->get<std::string>();
  } else {
    call.arguments = arguments->dump();
  }
  return std::make_pair(std::move(call), end);
}

// The calls from `start` on, or nullopt when any block is malformed.
std::optional<std::vector<ToolCall>> read_calls(ToolCallFormat format, std::string_view text, size_t start) {
  std::vector<ToolCall> calls;
  size_t at = start;
  switch (format) {
    case ToolCallFormat::kInternLM:
    case ToolCallFormat::kQwen: {
      const std::string_view open = format == ToolCallFormat::kInternLM ? kInternLMStart : kQwenStart;
      const std::string_view close = format == ToolCallFormat::kInternLM ? kInternLMEnd : kQwenEnd;
      // Each block: the marker, the object, then the closing marker (absent
      // when the closing token was a stop token and so not in the text).
      while (at != std::string_view::npos) {
        auto call = read_call(text, skip_space(text, at + open.size()));
        if (!call) return std::nullopt;
        calls.push_back(std::move(call->first));
        at = skip_space(text, call->second);
        if (starts_at(text, at, close)) at += close.size();
        at = text.find(open, at);
      }
      return calls;
    }
    case ToolCallFormat::kMistral: {
      // The marker, then a JSON list of call objects.
      at = skip_space(text, at + kMistralStart.size());
      if (at >= text.size() || text[at] != '[') return std::nullopt;
      at = skip_space(text, at + 1);
      while (true) {
        auto call = read_call(text, at);
        if (!call) return std::nullopt;
        calls.push_back(std::move(call->first));
        at = skip_space(text, call->second);
        if (at < text.size() && text[at] == ',') {
          at = skip_space(text, at + 1);
        } else if (at < text.size() && text[at] == ']') {
          return skip_space(text, at + 1) == text.size() ? std::optional(std::move(calls)) : std::nullopt;
        } else {
          return std::nullopt;
        }
      }
    }
    case ToolCallFormat::kLlama3: {
      if (starts_at(text, at, kPythonTag)) at += kPythonTag.size();
      at = skip_space(text, at);
      while (at < text.size()) {
        auto call = read_call(text, at);
        if (!call) return std::nullopt;
        calls.push_back(std::move(call->first));
        at = skip_space(text, call->second);
        if (at < text.size() && text[at] == ';') at = skip_space(text, at + 1);
      }
      return calls;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "internlm" || name == "internlm2" || name == "intern-s1") return ToolCallFormat::kInternLM;
  if (name == "qwen" || name == "qwen2d5" || name == "qwen2.5" || name == "hermes") return ToolCallFormat::kQwen;
  if (name == "llama3" || name == "llama3_json") return ToolCallFormat::kLlama3;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kInternLM: return "internlm";
    case ToolCallFormat::kQwen: return "qwen";
    case ToolCallFormat::kLlama3: return "llama3";
    case ToolCallFormat::kMistral: return "mistral";
  }
  return "?";
}

std::string tool_call_format_names() { return "internlm, qwen, llama3, mistral"; }

bool tokenizer_has_tool_call_markers(const Tokenizer& tokenizer, ToolCallFormat format) {
  const auto has = [&](std::string_view piece) { return tokenizer.piece_to_id(piece).has_value(); };
  switch (format) {
    case ToolCallFormat::kInternLM: return has("<|action_start|>") && has("<|plugin|>") && has("<|action_end|>");
    case ToolCallFormat::kQwen: return has(kQwenStart) && has(kQwenEnd);
    case ToolCallFormat::kLlama3: return true;
    case ToolCallFormat::kMistral: return has(kMistralStart);
  }
  return false;
}

bool tool_call_markers_are_special(const Tokenizer& tokenizer, ToolCallFormat format) {
  const std::string_view marker = format == ToolCallFormat::kInternLM ? "<|action_start|>" : start_marker(format);
  const std::optional<int32_t> id = tokenizer.piece_to_id(marker);
  return id && tokenizer.is_special(*id);
}

std::string tool_call_id(ToolCallFormat format) {
  static constexpr char kAlphanumeric[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphanumeric) - 2);
  std::string id = format == ToolCallFormat::kMistral ? "" : "call_";
  const size_t random = format == ToolCallFormat::kMistral ? 9 : 24;
  for (size_t i = 0; i < random; ++i) id += kAlphanumeric[pick(rng)];
  return id;
}

std::optional<ToolCallFormat> detect_tool_call_format(const Tokenizer& tokenizer) {
  for (ToolCallFormat format : {ToolCallFormat::kInternLM, ToolCallFormat::kQwen, ToolCallFormat::kMistral}) {
    if (tokenizer_has_tool_call_markers(tokenizer, format)) return format;
  }
  if (tokenizer.piece_to_id(kPythonTag)) return ToolCallFormat::kLlama3;
  return std::nullopt;
}

ToolCallText parse_tool_calls(ToolCallFormat format, std::string_view text) {
  ToolCallText result;
  if (std::optional<size_t> start = call_start(format, text, 0)) {
    if (auto calls = read_calls(format, text, *start); calls && !calls->empty()) {
      result.content = std::string(text.substr(0, *start));
      result.calls = std::move(*calls);
      return result;
    }
  }
  result.content = std::string(text);
  return result;
}

std::string ToolCallStream::feed(std::string_view chunk) {
  text_ += chunk;
  if (in_call_) return {};
  const std::string_view text = text_;
  if (std::optional<size_t> start = call_start(format_, text, sent_)) {
    in_call_ = true;
    std::string out(text.substr(sent_, *start - sent_));
    sent_ = *start;
    return out;
  }
  // Llama 3: an answer that is only spaces so far may still open with '{'.
  if (format_ == ToolCallFormat::kLlama3 && skip_space(text, 0) == text.size()) return {};
  // Hold the longest suffix that is a proper prefix of the start marker; it
  // begins on a character boundary, the markers being ASCII.
  const std::string_view marker = start_marker(format_);
  size_t hold = 0;
  for (size_t length = std::min(marker.size() - 1, text.size() - sent_); length > 0; --length) {
    if (text.substr(text.size() - length) == marker.substr(0, length)) {
      hold = length;
      break;
    }
  }
  std::string out(text.substr(sent_, text.size() - hold - sent_));
  sent_ = text.size() - hold;
  return out;
}

ToolCallText ToolCallStream::finish() {
  ToolCallText parsed = parse_tool_calls(format_, text_);
  ToolCallText rest;
  if (!parsed.calls.empty()) {
    rest.content = parsed.content.size() > sent_ ? parsed.content.substr(sent_) : std::string();
    rest.calls = std::move(parsed.calls);
  } else {
    rest.content = text_.substr(sent_);
  }
  sent_ = text_.size();
  in_call_ = true;  // nothing more is handed out
  return rest;
}

}  // namespace tessera::text
