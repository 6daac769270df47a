// BpeModel: the "model" of a Hugging Face tokenizer.json of type BPE.
//
// A word is split into code points; each becomes its vocab id, or with
// byte_fallback its UTF-8 bytes as <0xXX> pieces, or unk (consecutive unks
// fused when fuse_unk). Then the adjacent pair with the lowest merge rank is
// merged, leftmost first among equal ranks, until no pair has a merge — the
// algorithm of HF's Word::merge_all, kept exact because ids must match HF.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/json_field.h"

namespace tessera::text {

// std::hash over string_view, so maps keyed by std::string accept string_view lookups.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};
using PieceMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Parses the "model" value. Throws Error(kInvalidArgument) for an
  // inconsistent model (a merge of pieces not in the vocab, a bad id) and
  // Error(kUnsupported) for options tessera does not implement (dropout,
  // continuing_subword_prefix, end_of_word_suffix).
  static BpeModel from_json(const JsonField& spec);

  // Appends the ids of one pre-tokenized word (valid UTF-8).
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;

  std::optional<int32_t> piece_to_id(std::string_view piece) const;
  // nullptr when no piece has this id.
  const std::string* id_to_piece(int32_t id) const;
  // The largest id + 1.
  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void merge_all(std::vector<int32_t>& symbols, std::vector<size_t>& lengths) const;

  PieceMap vocab_;
  std::vector<std::string> pieces_;  // by id
  std::vector<bool> has_piece_;      // false for ids the vocab skips
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // -1 where <0xXX> is not in the vocab
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_id_;
};

}  // namespace tessera::text
