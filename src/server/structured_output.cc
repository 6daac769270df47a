#include "server/structured_output.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/log.h"
#include "server/api_error.h"

namespace tessera::server {

std::shared_ptr<const text::GrammarVocabulary> GrammarVocabularyCache::get(const text::Tokenizer& tokenizer) {
  std::call_once(once_, [&] {
    const auto start = std::chrono::steady_clock::now();
    vocabulary_ = std::make_shared<const text::GrammarVocabulary>(tokenizer);
    log_info("structured output: the vocabulary's {} tokens indexed in {:.0f} ms", vocabulary_->size(),
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  });
  return vocabulary_;
}

std::shared_ptr<engine::TokenConstraint> make_json_constraint(
    std::shared_ptr<const text::JsonGrammar> grammar, std::shared_ptr<const text::GrammarVocabulary> vocabulary) {
  const int32_t size = vocabulary->size();
  text::JsonTokenMatcher matcher(std::move(grammar), std::move(vocabulary));
  std::vector<uint64_t> first((static_cast<size_t>(size) + 63) / 64, 0);
  matcher.allowed(first);
  if (std::all_of(first.begin(), first.end(), [](uint64_t w) { return w == 0; })) {
    throw bad_request("the model's vocabulary has no token that can start this response_format's output",
                      "response_format", "unsupported_value");
  }
  return std::make_shared<JsonConstraint>(std::move(matcher));
}

}  // namespace tessera::server
