#include "text/pre_tokenizer.h"

#include "text/utf8.h"

namespace tessera::text {
namespace {

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}

  void split(std::string text, bool at_start, std::vector<std::string>& words) const override {
    std::vector<std::string> current{std::move(text)};
    for (const auto& step : steps_) {
      std::vector<std::string> next;
      // Only the first word of a span that begins the input still begins it.
      for (size_t i = 0; i < current.size(); ++i) step->split(std::move(current[i]), at_start && i == 0, next);
      current = std::move(next);
    }
    for (auto& word : current) words.push_back(std::move(word));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// Spaces become the replacement; a replacement is prepended (unless the text
// already starts with one); with `split`, every replacement starts a new word
// (HF's MergedWithNext: "a  b" -> "▁a", "▁", "▁b").
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}

  void split(std::string text, bool at_start, std::vector<std::string>& words) const override {
    text = replace_all(text, " ", replacement_);
    const bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && at_start);
    if (prepend && !text.starts_with(replacement_)) text.insert(0, replacement_);
    if (text.empty()) return;
    if (!split_) {
      words.push_back(std::move(text));
      return;
    }
    size_t word_start = 0;
    size_t pos = text.find(replacement_);
    while (pos != std::string::npos) {
      if (pos > word_start) words.push_back(text.substr(word_start, pos - word_start));
      word_start = pos;
      pos = text.find(replacement_, pos + replacement_.size());
    }
    words.push_back(text.substr(word_start));
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

}  // namespace

PrependScheme parse_prepend_scheme(const JsonField& spec) {
  if (const auto scheme = spec.find("prepend_scheme")) {
    const std::string name = scheme->as_string();
    if (name == "always") return PrependScheme::kAlways;
    if (name == "first") return PrependScheme::kFirst;
    if (name == "never") return PrependScheme::kNever;
    scheme->fail("expected \"always\", \"first\" or \"never\", found \"" + name + "\"");
  }
  return spec.bool_or("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

std::string parse_metaspace_replacement(const JsonField& spec) {
  std::string replacement = spec.string_or("replacement", "\u2581");
  if (utf8_length(replacement) != 1 || !is_valid_utf8(replacement))
    spec.at("replacement").fail("expected a single character");
  return replacement;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonField& spec) {
  const std::string type = spec.at("type").as_string();
  if (type == "Sequence") {
    const JsonField list = spec.at("pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list.array_size(); ++i) steps.push_back(make_pre_tokenizer(list.at(i)));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(parse_metaspace_replacement(spec), parse_prepend_scheme(spec),
                                                   spec.bool_or("split", true));
  }
  spec.unsupported("pre_tokenizer", type);
}

}  // namespace tessera::text
