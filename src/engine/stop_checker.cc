#include "engine/stop_checker.h"

#include <algorithm>

namespace tessera::engine {
namespace {
bool contains(const std::vector<int32_t>& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }
}  // namespace

bool ends_with_stop_token(const Sequence& seq, const StopConfig& config) {
  const Request& r = seq.request;
  if (seq.num_output_tokens() == 0) return false;
  const int32_t last = seq.tokens.back();
  return contains(r.stop_ids, last) || (!r.ignore_eos && contains(config.eos_ids, last));
}

std::optional<FinishReason> check_finish(const Sequence& seq, const StopConfig& config) {
  const Request& r = seq.request;
  if (seq.num_output_tokens() > 0) {
    if (ends_with_stop_token(seq, config)) return FinishReason::kStop;
    if (r.constraint && (r.constraint->done() || seq.constraint_broken)) return FinishReason::kStop;
  }
  if (seq.num_output_tokens() >= r.max_tokens) return FinishReason::kLength;
  if (seq.num_tokens() >= config.session_len) return FinishReason::kLength;
  return std::nullopt;
}

std::vector<int32_t> masked_ids(const Sequence& seq, const StopConfig& config) {
  const Request& r = seq.request;
  if (seq.num_output_tokens() >= r.min_tokens) return {};
  std::vector<int32_t> ids = r.stop_ids;
  if (!r.ignore_eos) ids.insert(ids.end(), config.eos_ids.begin(), config.eos_ids.end());
  return ids;
}

}  // namespace tessera::engine
