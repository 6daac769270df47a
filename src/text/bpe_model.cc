#include "text/bpe_model.h"

#include <fmt/format.h>

#include <queue>

#include "text/decoder.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

// Far past any real vocabulary (the largest are ~260k): refuses ids that would
// make the id table absurdly large.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

}  // namespace

BpeModel BpeModel::from_json(const JsonField& spec) {
  BpeModel model;
  for (const char* option : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const auto value = spec.find(option); value && !value->as_string().empty())
      value->unsupported("BPE option", option);
  }
  if (const auto dropout = spec.find("dropout")) {
    if (!dropout->value().is_number() || dropout->value().get<double>() != 0.0)
      dropout->unsupported("BPE option", "dropout");
  }
  model.byte_fallback_ = spec.bool_or("byte_fallback", false);
  model.fuse_unk_ = spec.bool_or("fuse_unk", false);
  model.ignore_merges_ = spec.bool_or("ignore_merges", false);

  const JsonField vocab = spec.at("vocab");
  if (!vocab.value().is_object()) vocab.fail("expected an object of piece: id");
  int64_t max_id = -1;
  for (const auto& [piece, id_json] : vocab.value().items()) {
    const JsonField id_field = vocab.member(id_json, piece);
    const int64_t id = id_field.as_int();
    if (id < 0 || id > kMaxTokenId) id_field.fail(fmt::format("token id {} out of range", id));
    model.vocab_.emplace(piece, static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  model.pieces_.resize(static_cast<size_t>(max_id + 1));
  model.has_piece_.resize(static_cast<size_t>(max_id + 1), false);
  for (const auto& [piece, id] : model.vocab_) {
    model.pieces_[id] = piece;
    model.has_piece_[id] = true;
  }

  const auto lookup = [&](const std::string& piece, const JsonField& where) {
    const auto id = model.piece_to_id(piece);
    if (!id) where.fail(fmt::format("piece \"{}\" is not in model.vocab", piece));
    return *id;
  };
  const JsonField merges = spec.at("merges");
  for (size_t rank = 0; rank < merges.array_size(); ++rank) {
    const JsonField merge = merges.at(rank);
    std::string left, right;
    if (merge.value().is_string()) {  // "a b", the format before tokenizers 0.20
      const std::string text = merge.as_string();
      const size_t space = text.find(' ');
      if (space == std::string::npos) merge.fail("expected two pieces separated by a space");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else {  // ["a", "b"]
      if (merge.array_size() != 2) merge.fail("expected a pair of pieces");
      left = merge.at(0).as_string();
      right = merge.at(1).as_string();
    }
    const int32_t left_id = lookup(left, merge);
    const int32_t right_id = lookup(right, merge);
    // A later duplicate replaces an earlier one, as in HF's HashMap.
    model.merges_[pair_key(left_id, right_id)] = Merge{static_cast<int32_t>(rank), lookup(left + right, merge)};
  }

  for (int byte = 0; byte < 256; ++byte) {
    const auto id = model.piece_to_id(byte_piece(static_cast<unsigned char>(byte)));
    model.byte_ids_[byte] = id ? *id : -1;
  }
  if (const auto unk = spec.find("unk_token")) model.unk_id_ = lookup(unk->as_string(), *unk);
  return model;
}

std::optional<int32_t> BpeModel::piece_to_id(std::string_view piece) const {
  const auto it = vocab_.find(piece);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_piece(int32_t id) const {
  if (id < 0 || id >= size() || !has_piece_[id]) return nullptr;
  return &pieces_[id];
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto id = piece_to_id(word)) {
      ids.push_back(*id);
      return;
    }
  }
  std::vector<int32_t> symbols;
  std::vector<size_t> lengths;  // bytes of the word each symbol covers
  // An unknown character waits here so that a run of them can be fused into one unk.
  size_t pending_unk_length = 0;  // 0: none pending
  const auto add = [&](int32_t id, size_t length) {
    symbols.push_back(id);
    lengths.push_back(length);
  };
  const auto flush_unk = [&] {
    if (pending_unk_length != 0) add(*unk_id_, pending_unk_length);
    pending_unk_length = 0;
  };
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t length = std::max<size_t>(1, utf8_sequence_length(word, pos));
    const std::string_view character = word.substr(pos, length);
    pos += length;
    if (const auto id = piece_to_id(character)) {
      flush_unk();
      add(*id, length);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (const char c : character) all_bytes &= byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        // Like HF, a pending unk is not flushed here: it follows these bytes.
        for (const char c : character) add(byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (!unk_id_) continue;  // HF drops a character it has no way to encode
    if (!fuse_unk_) flush_unk();
    pending_unk_length += length;
  }
  flush_unk();
  merge_all(symbols, lengths);
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (lengths[i] != 0) ids.push_back(symbols[i]);
  }
}

void BpeModel::merge_all(std::vector<int32_t>& symbols, std::vector<size_t>& lengths) const {
  const auto count = static_cast<int64_t>(symbols.size());
  if (count < 2 || merges_.empty()) return;
  // A doubly linked list over the symbols; a merged-away symbol gets length 0.
  std::vector<int64_t> prev(count), next(count);
  for (int64_t i = 0; i < count; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < count ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int64_t pos;
    int32_t merged_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push_pair = [&](int64_t left) {
    const auto it = merges_.find(pair_key(symbols[left], symbols[next[left]]));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.merged_id});
  };
  for (int64_t i = 0; i + 1 < count; ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (lengths[top.pos] == 0 || next[top.pos] < 0) continue;
    const int64_t right = next[top.pos];
    // Skip a stale entry: the pair at this position has changed since it was queued.
    const auto it = merges_.find(pair_key(symbols[top.pos], symbols[right]));
    if (it == merges_.end() || it->second.merged_id != top.merged_id) continue;

    symbols[top.pos] = top.merged_id;
    lengths[top.pos] += lengths[right];
    lengths[right] = 0;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;

    if (prev[top.pos] >= 0) push_pair(prev[top.pos]);
    if (next[top.pos] >= 0) push_pair(top.pos);
  }
}

}  // namespace tessera::text
