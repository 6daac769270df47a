#include "text/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <vector>

#include "core/error.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string text) const override {
    for (const auto& step : steps_) text = step->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Llama 2's "dummy prefix": HF prepends only to non-empty text, so an empty
// prompt stays empty.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string text) const override { return text.empty() ? text : prefix_ + text; }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::string normalize(std::string text) const override { return replace_all(text, from_, to_); }

 private:
  std::string from_;
  std::string to_;
};

// NFC, NFD, NFKC, NFKD (Qwen2 uses NFC), by ICU's Normalizer2: the Unicode
// normalization forms need the Unicode Character Database's tables, and ICU
// is the maintained implementation every distribution ships.
class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(const icu::Normalizer2* normalizer) : normalizer_(normalizer) {}
  std::string normalize(std::string text) const override {
    UErrorCode status = U_ZERO_ERROR;
    if (normalizer_->isNormalizedUTF8(text, status) && U_SUCCESS(status)) return text;
    status = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
    normalizer_->normalizeUTF8(0, text, sink, nullptr, status);
    if (U_FAILURE(status)) {
      throw Error(ErrorKind::kInternal, std::string("Unicode normalization failed: ") + u_errorName(status));
    }
    return out;
  }

 private:
  const icu::Normalizer2* normalizer_;  // owned by ICU, valid for the process
};

std::unique_ptr<Normalizer> make_unicode_normalizer(const JsonField& spec, const std::string& form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = form == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                                       : form == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                                       : form == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                                        : icu::Normalizer2::getNFKDInstance(status);
  if (U_FAILURE(status) || normalizer == nullptr) {
    spec.unsupported("normalizer", form + " (ICU's normalization data could not be loaded: " +
                                       u_errorName(status) + ")");
  }
  return std::make_unique<UnicodeNormalizer>(normalizer);
}

}  // namespace

std::string replace_pattern_string(const JsonField& pattern, std::string_view component) {
  if (pattern.find("Regex")) pattern.unsupported(component, "Replace with a Regex pattern");
  std::string from = pattern.at("String").as_string();
  if (from.empty()) pattern.fail("the pattern is empty");
  return from;
}

std::unique_ptr<Normalizer> make_normalizer(const JsonField& spec) {
  const std::string type = spec.at("type").as_string();
  if (type == "Sequence") {
    const JsonField list = spec.at("normalizers");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list.array_size(); ++i) steps.push_back(make_normalizer(list.at(i)));
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(spec.at("prepend").as_string());
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(replace_pattern_string(spec.at("pattern"), "normalizer"),
                                               spec.at("content").as_string());
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") return make_unicode_normalizer(spec, type);
  spec.unsupported("normalizer", type);
}

}  // namespace tessera::text
