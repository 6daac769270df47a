#include "text/reasoning.h"

#include <algorithm>

#include "text/tokenizer.h"

namespace tessera::text {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t length = std::min(tag.size() - 1, text.size()); length > 0; --length) {
    if (text.substr(text.size() - length) == tag.substr(0, length)) return length;
  }
  return 0;
}

}  // namespace

std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  if (name == "deepseek-r1" || name == "qwen-qwq") return ReasoningFormat::kThinkTags;
  return std::nullopt;
}

std::string reasoning_format_names() { return "deepseek-r1, qwen-qwq"; }

bool reasoning_tags_are_special(const Tokenizer& tokenizer, ReasoningFormat) {
  const std::optional<int32_t> close = tokenizer.piece_to_id(kClose);
  return close && tokenizer.is_special(*close);
}

ReasoningText split_reasoning(ReasoningFormat, std::string_view text) {
  ReasoningText out;
  const size_t close = text.find(kClose);
  std::string_view reasoning = close == std::string_view::npos ? text : text.substr(0, close);
  if (reasoning.starts_with(kOpen)) reasoning.remove_prefix(kOpen.size());
  out.reasoning = std::string(reasoning);
  if (close != std::string_view::npos) out.content = std::string(text.substr(close + kClose.size()));
  return out;
}

ReasoningText ReasoningStream::feed(std::string_view chunk) {
  ReasoningText out;
  if (!thinking_) {
    out.content = std::string(chunk);
    return out;
  }
  pending_ += chunk;
  if (at_start_) {
    if (pending_.size() < kOpen.size() && std::string_view(kOpen).starts_with(pending_)) return out;
    if (pending_.starts_with(kOpen)) pending_.erase(0, kOpen.size());
    at_start_ = false;
  }
  if (const size_t close = pending_.find(kClose); close != std::string::npos) {
    out.reasoning = pending_.substr(0, close);
    out.content = pending_.substr(close + kClose.size());
    pending_.clear();
    thinking_ = false;
    return out;
  }
  const size_t hold = partial_tag(pending_, kClose);
  out.reasoning = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

ReasoningText ReasoningStream::finish() {
  ReasoningText out;
  // Unclosed: the held text is reasoning, as the whole-answer split has it
  // (a lone "<thi" at the start included, there being nothing else).
  out.reasoning = std::move(pending_);
  pending_.clear();
  thinking_ = false;
  return out;
}

}  // namespace tessera::text
