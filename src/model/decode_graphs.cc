#include "model/decode_graphs.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "core/error.h"
#include "core/log.h"

namespace tessera::model {

int64_t decode_graph_batch_bucket(int64_t num_seqs) {
  if (num_seqs <= 1) return 1;
  if (num_seqs <= 8) {
    int64_t bucket = 1;
    while (bucket < num_seqs) bucket *= 2;
    return bucket;
  }
  if (num_seqs <= 64) return (num_seqs + 7) / 8 * 8;
  return (num_seqs + 31) / 32 * 32;
}

int64_t decode_graph_width_bucket(int64_t max_blocks_per_seq) {
  int64_t width = 1;
  while (width < max_blocks_per_seq) width *= 2;
  return width;
}

namespace {

// `batch` (a decode step) padded to `sequences` sequences and block tables `width` wide.
ForwardBatch pad_decode_batch(const ForwardBatch& batch, int64_t sequences, int64_t width, int64_t spare_block) {
  const backend::AttentionBatch& in = batch.attention;
  const int64_t seqs = in.num_seqs();
  ForwardBatch padded;
  padded.token_ids = batch.token_ids;
  padded.token_ids.resize(sequences, 0);
  backend::AttentionBatch& out = padded.attention;
  out.positions = in.positions;
  out.positions.resize(sequences, 0);
  out.query_start.resize(sequences + 1);
  for (int64_t s = 0; s <= sequences; ++s) out.query_start[s] = static_cast<int32_t>(s);
  out.max_blocks_per_seq = static_cast<int32_t>(width);
  out.sliding_window = in.sliding_window;
  out.block_tables.assign(sequences * width, static_cast<int32_t>(spare_block));
  for (int64_t s = 0; s < seqs; ++s) {
    std::copy_n(in.block_tables.begin() + s * in.max_blocks_per_seq, in.max_blocks_per_seq,
                out.block_tables.begin() + s * width);
  }
  padded.logit_rows.resize(sequences);
  for (int64_t s = 0; s < sequences; ++s) padded.logit_rows[s] = static_cast<int32_t>(s);
  return padded;
}

}  // namespace

DecodeGraphs::DecodeGraphs(backend::Backend& backend, int64_t vocab_rows)
    : backend_(backend), vocab_rows_(vocab_rows), enabled_(backend.supports_graphs()) {}

void DecodeGraphs::set_enabled(bool enabled) {
  enabled_ = enabled && backend_.supports_graphs();
  if (!enabled_) {
    graphs_.clear();
    logits_ = Tensor();
  }
}

bool DecodeGraphs::applies(const ForwardBatch& batch, const backend::PagedKvCache& cache) const {
  const backend::AttentionBatch& a = batch.attention;
  const int64_t seqs = a.num_seqs();
  if (!enabled_ || cache.spare_block < 0 || seqs < 1 || seqs > kMaxSequences) return false;
  if (a.num_tokens() != seqs || static_cast<int64_t>(batch.logit_rows.size()) != seqs) return false;
  for (int64_t s = 0; s < seqs; ++s) {
    if (a.query_start[s] != s || batch.logit_rows[s] != s) return false;
  }
  return a.query_start[seqs] == seqs;
}

Tensor DecodeGraphs::run(const ForwardBatch& batch, const backend::PagedKvCache& cache, const Forward& forward,
                         const StageInputs& stage_inputs) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t seqs = batch.attention.num_seqs();
  const Key key{decode_graph_batch_bucket(seqs), decode_graph_width_bucket(batch.attention.max_blocks_per_seq)};
  if (backend_.graph_generation() != generation_) graphs_.clear();  // recorded over buffers that have moved
  if (!logits_.defined() || logits_.dim(0) < key.first) {
    logits_ = Tensor::empty({key.first, vocab_rows_}, DType::kF32, backend_.allocator());
    graphs_.clear();  // they write into the old buffer
  }
  Tensor logits = logits_.slice_rows(0, key.first);
  const ForwardBatch padded = pad_decode_batch(batch, key.first, key.second, cache.spare_block);

  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    if (!(staged_key_ == key && stage_inputs && stage_only_inputs(padded, stage_inputs))) stage(padded, logits, forward);
    staged_key_ = key;
    if (backend_.graph_generation() == generation_) {
      it->second->replay();
      ++replays_;
      replay_host_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return logits.slice_rows(0, seqs);
    }
    graphs_.clear();  // staging moved a buffer (it should not): run this step as a new bucket
  }

  staged_key_ = Key{-1, -1};
  forward(padded, logits);  // this step's result; makes the backend's one-time choices
  if (auto graph = record(key, padded, logits, forward)) {
    graphs_.emplace(key, std::move(graph));
    staged_key_ = key;  // the recording staged this step's inputs
  }
  return logits.slice_rows(0, seqs);
}

bool DecodeGraphs::stage_only_inputs(const ForwardBatch& padded, const StageInputs& stage_inputs) {
  bool staged = false;
  with_staging([&] { staged = stage_inputs(padded); });
  return staged;
}

void DecodeGraphs::stage(const ForwardBatch& padded, Tensor& logits, const Forward& forward) {
  with_staging([&] { forward(padded, logits); });
}

void DecodeGraphs::with_staging(const std::function<void()>& work) {
  backend_.set_staging(true);
  try {
    work();
  } catch (...) {
    backend_.set_staging(false);
    throw;
  }
  backend_.set_staging(false);
}

std::unique_ptr<backend::DeviceGraph> DecodeGraphs::record(const Key& key, const ForwardBatch& padded, Tensor& logits,
                                                           const Forward& forward) {
  try {
    // Staging sizes every buffer the recording will read (the split plan of a graph, say).
    stage(padded, logits, forward);
    if (backend_.graph_generation() != generation_) {
      graphs_.clear();
      generation_ = backend_.graph_generation();
    }
    backend_.begin_capture();
    try {
      forward(padded, logits);
    } catch (...) {
      try {
        backend_.end_capture();
      } catch (const std::exception&) {
        // The recording's own error is the one to report.
      }
      throw;
    }
    std::unique_ptr<backend::DeviceGraph> graph = backend_.end_capture();
    log_debug("decode graph recorded: {} sequences, block tables {} wide ({} graphs)", key.first, key.second,
              graphs_.size() + 1);
    return graph;
  } catch (const std::exception& e) {
    log_warning("CUDA graphs are off from now on; decode steps launch their kernels one by one ({})", e.what());
    enabled_ = false;
    graphs_.clear();
    return nullptr;  // logits_ stays: it holds this step's result
  }
}

}  // namespace tessera::model
