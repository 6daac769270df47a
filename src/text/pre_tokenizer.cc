#include "text/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "text/byte_level.h"
#include "text/regex.h"
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

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Cuts `text` at the matches of `regex` and arranges matches and the text
// between them as HF's SplitDelimiterBehavior says; `invert` swaps the two.
void split_by_regex(const Regex& regex, SplitBehavior behavior, bool invert, const std::string& text,
                    std::vector<std::string>& words) {
  if (text.empty()) return;
  struct Interval {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Interval> intervals;
  size_t previous = 0;
  for (const auto& [begin, end] : regex.find_all(text)) {
    if (begin > previous) intervals.push_back({previous, begin, invert});
    intervals.push_back({begin, end, !invert});
    previous = end;
  }
  if (previous < text.size()) intervals.push_back({previous, text.size(), invert});

  std::vector<std::pair<size_t, size_t>> pieces;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Interval& i : intervals)
        if (!i.is_match) pieces.emplace_back(i.begin, i.end);
      break;
    case SplitBehavior::kIsolated:
      for (const Interval& i : intervals) pieces.emplace_back(i.begin, i.end);
      break;
    case SplitBehavior::kMergedWithPrevious:
    case SplitBehavior::kContiguous:
      for (const Interval& i : intervals) {
        const bool merge = behavior == SplitBehavior::kContiguous ? i.is_match == previous_match
                                                                   : i.is_match && !previous_match;
        if (merge && !pieces.empty()) {
          pieces.back().second = i.end;
        } else {
          pieces.emplace_back(i.begin, i.end);
        }
        previous_match = i.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t k = intervals.size(); k-- > 0;) {
        const Interval& i = intervals[k];
        if (i.is_match && !previous_match && !pieces.empty()) {
          pieces.back().first = i.begin;
        } else {
          pieces.emplace_back(i.begin, i.end);
        }
        previous_match = i.is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
  }
  for (const auto& [begin, end] : pieces) {
    if (end > begin) words.push_back(text.substr(begin, end - begin));
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void split(std::string text, bool at_start, std::vector<std::string>& words) const override {
    split_by_regex(regex_, behavior_, invert_, text, words);
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's word pattern, which ByteLevel applies when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Optionally a space before the text and GPT-2's word split, then every byte
// of each word written as its byte-level character.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, "ByteLevel pre-tokenizer");
  }
  void split(std::string text, bool at_start, std::vector<std::string>& words) const override {
    if (add_prefix_space_ && !text.starts_with(' ')) text = " " + text;
    std::vector<std::string> pieces;
    if (regex_) {
      split_by_regex(*regex_, SplitBehavior::kIsolated, false, text, pieces);
    } else if (!text.empty()) {
      pieces.push_back(std::move(text));
    }
    for (const std::string& piece : pieces) words.push_back(to_byte_level(piece));
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null: no word split
};

SplitBehavior parse_split_behavior(const JsonField& field) {
  const std::string name = field.as_string();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  field.fail("unknown split behavior \"" + name + "\"");
}

std::unique_ptr<PreTokenizer> make_split(const JsonField& spec) {
  const JsonField pattern = spec.at("pattern");
  std::string regex;
  if (const auto literal = pattern.find("String")) {
    regex = regex_escape(literal->as_string());
  } else {
    regex = pattern.at("Regex").as_string();
  }
  return std::make_unique<SplitPreTokenizer>(Regex(regex, pattern.where()), parse_split_behavior(spec.at("behavior")),
                                             spec.bool_or("invert", false));
}

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
  if (type == "Split") return make_split(spec);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(spec.bool_or("add_prefix_space", true),
                                                   spec.bool_or("use_regex", true));
  }
  spec.unsupported("pre_tokenizer", type);
}

}  // namespace tessera::text
