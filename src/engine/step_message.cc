#include "engine/step_message.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tessera::engine {

namespace {

constexpr int32_t kStep = 1;
constexpr int32_t kStop = 2;

void put(std::vector<int32_t>& words, const std::vector<int32_t>& values) {
  words.push_back(static_cast<int32_t>(values.size()));
  words.insert(words.end(), values.begin(), values.end());
}

[[noreturn]] void malformed(const std::string& what) {
  throw Error(ErrorKind::kCommFailure, fmt::format("a malformed step message from node 0: {}", what));
}

class Reader {
 public:
  explicit Reader(const std::vector<int32_t>& words) : words_(words) {}
  int32_t word(const char* what) {
    if (at_ >= words_.size()) malformed(fmt::format("it ends before {}", what));
    return words_[at_++];
  }
  std::vector<int32_t> vector(const char* what) {
    const int32_t n = word(what);
    if (n < 0 || static_cast<size_t>(n) > words_.size() - at_) malformed(fmt::format("{} has a bad length {}", what, n));
    std::vector<int32_t> values(words_.begin() + at_, words_.begin() + at_ + n);
    at_ += n;
    return values;
  }
  bool done() const { return at_ == words_.size(); }

 private:
  const std::vector<int32_t>& words_;
  size_t at_ = 0;
};

// A two-word header {kind, payload words}, then the payload.
void broadcast_words(comm::TcpCommunicator& link, std::vector<int32_t>& words, bool unbounded_header, int32_t& kind) {
  Tensor header = Tensor::empty({2}, DType::kI32);
  header.data<int32_t>()[0] = kind;
  header.data<int32_t>()[1] = static_cast<int32_t>(words.size());
  if (unbounded_header) {
    link.broadcast_unbounded(header, 0);
  } else {
    link.broadcast(header, 0);
  }
  kind = header.data<int32_t>()[0];
  const int32_t count = header.data<int32_t>()[1];
  if (count < 0) malformed("a negative length");
  if (count == 0) {
    words.clear();
    return;
  }
  Tensor payload = Tensor::empty({count}, DType::kI32);
  if (link.rank() == 0) std::copy(words.begin(), words.end(), payload.data<int32_t>());
  link.broadcast(payload, 0);
  words.assign(payload.data<int32_t>(), payload.data<int32_t>() + count);
}

}  // namespace

std::vector<int32_t> encode_step(const model::ForwardBatch& batch) {
  std::vector<int32_t> words;
  const backend::AttentionBatch& a = batch.attention;
  words.reserve(8 + batch.token_ids.size() + a.positions.size() + a.query_start.size() + a.block_tables.size() +
                batch.logit_rows.size());
  put(words, batch.token_ids);
  put(words, a.positions);
  put(words, a.query_start);
  put(words, a.block_tables);
  put(words, batch.logit_rows);
  words.push_back(a.max_blocks_per_seq);
  words.push_back(static_cast<int32_t>(a.sliding_window & 0xffffffff));
  words.push_back(static_cast<int32_t>(a.sliding_window >> 32));
  return words;
}

model::ForwardBatch decode_step(const std::vector<int32_t>& words) {
  Reader in(words);
  model::ForwardBatch batch;
  backend::AttentionBatch& a = batch.attention;
  batch.token_ids = in.vector("token_ids");
  a.positions = in.vector("positions");
  a.query_start = in.vector("query_start");
  a.block_tables = in.vector("block_tables");
  batch.logit_rows = in.vector("logit_rows");
  a.max_blocks_per_seq = in.word("max_blocks_per_seq");
  const auto low = static_cast<uint32_t>(in.word("sliding_window"));
  const auto high = static_cast<int64_t>(in.word("sliding_window"));
  a.sliding_window = (high << 32) | low;
  if (!in.done()) malformed("words left over");
  const int64_t seqs = a.num_seqs();
  if (a.positions.size() != batch.token_ids.size() || seqs < 0 || a.max_blocks_per_seq < 0 ||
      static_cast<int64_t>(a.block_tables.size()) != seqs * a.max_blocks_per_seq ||
      (seqs >= 0 && !a.query_start.empty() && a.query_start.back() != static_cast<int32_t>(batch.token_ids.size()))) {
    malformed(fmt::format("{} tokens, {} positions, {} query starts, {} block-table entries of {} per sequence",
                          batch.token_ids.size(), a.positions.size(), a.query_start.size(), a.block_tables.size(),
                          a.max_blocks_per_seq));
  }
  return batch;
}

void send_step(comm::TcpCommunicator& link, const model::ForwardBatch* batch) {
  std::vector<int32_t> words;
  if (link.rank() == 0 && batch) words = encode_step(*batch);
  int32_t kind = batch ? kStep : kStop;
  broadcast_words(link, words, /*unbounded_header=*/false, kind);
}

std::optional<model::ForwardBatch> receive_step(comm::TcpCommunicator& link) {
  std::vector<int32_t> words;
  int32_t kind = 0;
  broadcast_words(link, words, /*unbounded_header=*/true, kind);
  if (kind == kStop) return std::nullopt;
  if (kind != kStep) malformed(fmt::format("unknown kind {}", kind));
  return decode_step(words);
}

}  // namespace tessera::engine
