#include "text/llama2c_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_map>

#include "core/error.h"
#include "text/decoder.h"
#include "text/sentencepiece_bpe_writer.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

constexpr int32_t kFirstBytePiece = 3;  // after <unk>, <s>, </s>
constexpr int32_t kFirstRegularPiece = kFirstBytePiece + 256;
constexpr int32_t kMaxTokenLength = 1 << 16;  // SentencePiece pieces are short; this is "corrupt"

struct Llama2cVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

[[noreturn]] void bad_file(const std::filesystem::path& path, const std::string& problem) {
  throw Error(ErrorKind::kInvalidArgument, fmt::format("{} is not a valid llama2.c tokenizer: {}", path.string(), problem),
              "pass the tokenizer.bin that belongs to the checkpoint (its vocab_size must match)");
}

class Reader {
 public:
  Reader(const std::filesystem::path& path, std::string bytes) : path_(path), bytes_(std::move(bytes)) {}

  template <typename T>
  T read(const char* what, int32_t token) {
    T value;
    std::memcpy(&value, take(sizeof(T), what, token), sizeof(T));
    return value;
  }
  std::string read_string(size_t length, int32_t token) { return std::string(take(length, "piece", token), length); }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  const char* take(size_t size, const char* what, int32_t token) {
    if (size > remaining()) {
      bad_file(path_, token < 0 ? fmt::format("truncated before the {}", what)
                                : fmt::format("truncated in the {} of token {}", what, token));
    }
    const char* data = bytes_.data() + pos_;
    pos_ += size;
    return data;
  }

  const std::filesystem::path& path_;
  std::string bytes_;
  size_t pos_ = 0;
};

Llama2cVocab read_llama2c_vocab(const std::filesystem::path& path, int32_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot open llama2.c tokenizer {}", path.string()));
  Reader reader(path, std::string(std::istreambuf_iterator<char>(in), {}));

  const auto max_length = reader.read<int32_t>("max_token_length header", -1);
  if (max_length <= 0 || max_length > kMaxTokenLength)
    bad_file(path, fmt::format("max_token_length {} in the header is absurd", max_length));
  Llama2cVocab vocab;
  for (int32_t id = 0; id < vocab_size; ++id) {
    const auto score = reader.read<float>("score", id);
    const auto length = reader.read<int32_t>("length", id);
    if (!std::isfinite(score)) bad_file(path, fmt::format("token {} has a score that is not a finite number", id));
    if (length <= 0 || length > max_length) {
      bad_file(path, fmt::format("token {} has length {} (the header's max_token_length is {})", id, length, max_length));
    }
    vocab.pieces.push_back(reader.read_string(static_cast<size_t>(length), id));
    vocab.scores.push_back(score);
  }
  if (reader.remaining() != 0) {
    bad_file(path, fmt::format("{} bytes follow the {} tokens the checkpoint's vocab_size gives", reader.remaining(),
                               vocab_size));
  }
  return vocab;
}

// llama2.c pieces use a real space where SentencePiece has "▁", and its
// export wrote "\n<s>\n" and "\n</s>\n" for the specials: restore both.
std::vector<std::string> to_sentencepiece_pieces(const std::filesystem::path& path, const Llama2cVocab& vocab) {
  std::vector<std::string> pieces(vocab.pieces.size());
  pieces[0] = "<unk>";
  pieces[1] = "<s>";
  pieces[2] = "</s>";
  for (int32_t id = kFirstBytePiece; id < kFirstRegularPiece; ++id) {
    const std::string expected = byte_piece(static_cast<unsigned char>(id - kFirstBytePiece));
    if (vocab.pieces[id] != expected)
      bad_file(path, fmt::format("token {} is \"{}\", expected the byte piece {}", id, vocab.pieces[id], expected));
    pieces[id] = expected;
  }
  std::unordered_map<std::string, int32_t> seen;
  for (int32_t id = 0; id < static_cast<int32_t>(pieces.size()); ++id) {
    if (id >= kFirstRegularPiece) {
      if (const auto bad = find_invalid_utf8(vocab.pieces[id]))
        bad_file(path, fmt::format("token {} is not valid UTF-8 (byte {})", id, *bad));
      pieces[id] = replace_all(vocab.pieces[id], " ", "\u2581");
    }
    const auto [it, inserted] = seen.emplace(pieces[id], id);
    if (!inserted) bad_file(path, fmt::format("tokens {} and {} are both \"{}\"", it->second, id, pieces[id]));
  }
  return pieces;
}

// Every split of a regular piece into two pieces of the vocabulary is a merge;
// the best-scoring merged piece merges first, as llama2.c's encode does.
std::vector<std::pair<int32_t, int32_t>> score_merges(const std::vector<std::string>& pieces,
                                                      const std::vector<float>& scores) {
  std::unordered_map<std::string_view, int32_t> regular;
  for (int32_t id = kFirstRegularPiece; id < static_cast<int32_t>(pieces.size()); ++id) regular.emplace(pieces[id], id);
  struct Candidate {
    int32_t merged, left, right;
  };
  std::vector<Candidate> candidates;
  for (int32_t id = kFirstRegularPiece; id < static_cast<int32_t>(pieces.size()); ++id) {
    const std::string_view piece = pieces[id];
    for (size_t split = utf8_sequence_length(piece, 0); split < piece.size();
         split += utf8_sequence_length(piece, split)) {
      const auto left = regular.find(piece.substr(0, split));
      const auto right = regular.find(piece.substr(split));
      if (left != regular.end() && right != regular.end()) candidates.push_back({id, left->second, right->second});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
    if (scores[a.merged] != scores[b.merged]) return scores[a.merged] > scores[b.merged];
    return a.merged < b.merged;
  });
  std::vector<std::pair<int32_t, int32_t>> merges;
  merges.reserve(candidates.size());
  for (const Candidate& candidate : candidates) merges.emplace_back(candidate.left, candidate.right);
  return merges;
}

}  // namespace

void write_llama2c_tokenizer(const std::filesystem::path& tokenizer_bin, const std::filesystem::path& out_dir,
                             int32_t vocab_size, int64_t model_max_length) {
  if (vocab_size < kFirstRegularPiece) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("vocab_size {} for {} is too small: llama2.c tokenizers hold <unk>, <s>, </s> and 256 "
                            "byte pieces",
                            vocab_size, tokenizer_bin.string()));
  }
  if (model_max_length <= 0)
    throw Error(ErrorKind::kInvalidArgument, fmt::format("model_max_length {} must be positive", model_max_length));
  Llama2cVocab vocab = read_llama2c_vocab(tokenizer_bin, vocab_size);
  SentencePieceBpe tokenizer;
  tokenizer.pieces = to_sentencepiece_pieces(tokenizer_bin, vocab);
  tokenizer.merges = score_merges(tokenizer.pieces, vocab.scores);
  tokenizer.model_max_length = model_max_length;
  write_sentencepiece_bpe(tokenizer, out_dir);
}

}  // namespace tessera::text
