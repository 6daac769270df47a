#include "text/incremental_detokenizer.h"

#include "core/error.h"
#include "text/decoder.h"

namespace tessera::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

bool IncrementalDetokenizer::is_dropped(int32_t id) const {
  if (id < 0 || id >= tokenizer_.vocab_size()) return true;
  if (skip_special_ && tokenizer_.is_special(id)) return true;
  try {
    tokenizer_.id_to_piece(id);
  } catch (const Error&) {
    return true;  // an id with no piece: decode ignores it
  }
  return false;
}

bool IncrementalDetokenizer::is_byte_piece(int32_t id) const {
  return !tokenizer_.is_special(id) && parse_byte_piece(tokenizer_.id_to_piece(id)).has_value();
}

std::string IncrementalDetokenizer::decode_window(size_t begin) const {
  return tokenizer_.decode(std::vector<int32_t>(window_.begin() + static_cast<std::ptrdiff_t>(begin), window_.end()),
                           skip_special_);
}

std::string IncrementalDetokenizer::push(int32_t id) {
  all_ids_.push_back(id);
  window_.push_back(id);
  if (is_dropped(id)) return {};  // adds no text, and does not end a run of byte pieces
  last_is_byte_ = is_byte_piece(id);
  if (last_is_byte_) return {};

  const std::string text = decode_window(0);
  if (text.size() <= context_text_.size() || !text.starts_with(context_text_)) return {};
  std::string fresh = text.substr(context_text_.size());
  if (std::string_view(fresh).ends_with(kReplacement)) return {};
  emitted_ += fresh;

  // The new ids become the context of the next window when their own text is
  // not empty; otherwise the window keeps its start and grows.
  std::string new_context = decode_window(read_);
  if (!new_context.empty()) {
    window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(read_));
    context_text_ = std::move(new_context);
  } else {
    context_text_ = text;
  }
  read_ = window_.size();
  return fresh;
}

std::string IncrementalDetokenizer::finish() {
  std::string rest;
  const std::string full = tokenizer_.decode(all_ids_, skip_special_);
  if (full.starts_with(emitted_)) {
    rest = full.substr(emitted_.size());
  } else {
    // Not reached with the tokenizers tessera has; the window's view is the best left.
    const std::string text = decode_window(0);
    if (text.starts_with(context_text_)) rest = text.substr(context_text_.size());
  }
  emitted_ += rest;
  window_.clear();
  read_ = 0;
  context_text_.clear();
  last_is_byte_ = false;
  return rest;
}

}  // namespace tessera::text
