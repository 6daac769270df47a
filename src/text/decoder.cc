#include "text/decoder.h"

#include <fmt/format.h>

#include "text/byte_level.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& token : tokens) token = replace_all(token, from_, to_);
  }

 private:
  std::string from_;
  std::string to_;
};

// Runs of byte pieces become their bytes when those form valid UTF-8; an
// invalid run becomes one U+FFFD per byte, exactly as HF does (an incremental
// detokenizer holds back text that ends in U+FFFD until more ids arrive).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    size_t run_length = 0;
    const auto flush = [&] {
      if (run_length == 0) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_length; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_length = 0;
    };
    for (auto& token : tokens) {
      if (const auto byte = parse_byte_piece(token)) {
        run += static_cast<char>(*byte);
        ++run_length;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const auto& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character
// from every token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& token : tokens) {
      std::string_view view = token;
      for (size_t i = 0; i < start_ && view.starts_with(content_); ++i) view.remove_prefix(content_.size());
      for (size_t i = 0; i < stop_ && view.ends_with(content_); ++i) view.remove_suffix(content_.size());
      token = std::string(view);
    }
  }

 private:
  std::string content_;
  size_t start_;
  size_t stop_;
};

// The replacement becomes a space, except in the first token where HF drops
// every replacement (not just a leading one) unless the scheme is "never".
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, PrependScheme scheme)
      : replacement_(std::move(replacement)), scheme_(scheme) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool drop = i == 0 && scheme_ != PrependScheme::kNever;
      tokens[i] = replace_all(tokens[i], replacement_, drop ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

// Each token's characters back to bytes (a token with a character outside the
// byte-level table, such as an added token, keeps its own UTF-8), all tokens
// joined, then read as UTF-8 with invalid bytes replaced: one text.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& token : tokens) {
      if (const auto raw = from_byte_level(token)) {
        bytes += *raw;
      } else {
        bytes += token;
      }
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

size_t non_negative(const JsonField& field) {
  const int64_t value = field.as_int();
  if (value < 0) field.fail("expected a non-negative integer");
  return static_cast<size_t>(value);
}

}  // namespace

std::optional<unsigned char> parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece[5] != '>') return std::nullopt;
  unsigned value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = piece[i];
    unsigned digit;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else return std::nullopt;
    value = value * 16 + digit;
  }
  return static_cast<unsigned char>(value);
}

std::string byte_piece(unsigned char byte) { return fmt::format("<0x{:02X}>", byte); }

std::unique_ptr<Decoder> make_decoder(const JsonField& spec) {
  const std::string type = spec.at("type").as_string();
  if (type == "Sequence") {
    const JsonField list = spec.at("decoders");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list.array_size(); ++i) steps.push_back(make_decoder(list.at(i)));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(replace_pattern_string(spec.at("pattern"), "decoder"),
                                            spec.at("content").as_string());
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const JsonField content = spec.at("content");
    std::string character = content.as_string();
    if (utf8_length(character) != 1) content.fail("expected a single character");
    return std::make_unique<StripDecoder>(std::move(character), non_negative(spec.at("start")),
                                          non_negative(spec.at("stop")));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspaceDecoder>(parse_metaspace_replacement(spec), parse_prepend_scheme(spec));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  spec.unsupported("decoder", type);
}

}  // namespace tessera::text
