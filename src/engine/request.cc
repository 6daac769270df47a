#include "engine/request.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tessera::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "error";
}

void validate(const Request& r, int64_t session_len, int64_t vocab_size) {
  auto fail = [](std::string message, std::string hint) {
    throw Error(ErrorKind::kInvalidArgument, std::move(message), std::move(hint));
  };
  if (r.prompt.empty()) fail("the prompt has no tokens", "give a non-empty prompt");
  if (static_cast<int64_t>(r.prompt.size()) >= session_len) {
    fail(fmt::format("the prompt has {} tokens; the session length is {} (prompt and output together)",
                     r.prompt.size(), session_len),
         "shorten the prompt or raise --session-len");
  }
  for (int32_t id : r.prompt) {
    if (id < 0 || id >= vocab_size) fail(fmt::format("prompt token id {} is outside the vocabulary of {}", id, vocab_size), "");
  }
  if (r.max_tokens < 1) fail("max_tokens must be at least 1", "");
  if (r.min_tokens < 0) fail("min_tokens must be >= 0", "");
  if (r.top_logprobs < 0 || r.top_logprobs > 20) fail("top_logprobs must be in [0, 20]", "");
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > 20) fail("prompt_logprobs must be in [0, 20], or -1 for none", "");
  validate(r.sampling);
  for (const auto& [id, bias] : r.sampling.logit_bias) {
    if (id >= vocab_size) {
      fail(fmt::format("logit_bias names token id {}, outside the vocabulary of {}", id, vocab_size), "");
    }
  }
}

}  // namespace tessera::engine
