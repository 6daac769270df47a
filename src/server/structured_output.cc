#include "server/structured_output.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/log.h"
#include "server/api_error.h"
#include "text/tool_call_grammar.h"

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
    std::shared_ptr<const text::JsonGrammar> grammar, std::shared_ptr<const text::GrammarVocabulary> vocabulary,
    std::vector<text::GrammarToken> extra, std::shared_ptr<text::PatternMaskCache> pattern_masks) {
  int32_t size = vocabulary->size();
  for (const text::GrammarToken& token : extra) size = std::max(size, token.id + 1);
  text::JsonTokenMatcher matcher(std::move(grammar), std::move(vocabulary), std::move(extra),
                                 std::move(pattern_masks));
  std::vector<uint64_t> first((static_cast<size_t>(size) + 63) / 64, 0);
  matcher.allowed(first);
  if (std::all_of(first.begin(), first.end(), [](uint64_t w) { return w == 0; })) {
    throw bad_request("the model's vocabulary has no token that can start this response_format's output",
                      "response_format", "unsupported_value");
  }
  return std::make_shared<JsonConstraint>(std::move(matcher));
}

void force_tool_call(text::ToolCallFormat format, const nlohmann::ordered_json& tools,
                     const text::Tokenizer& tokenizer, GenerationOptions& options) {
  std::vector<text::ToolSignature> signatures;
  for (const nlohmann::ordered_json& tool : tools) {
    const nlohmann::ordered_json& function = tool["function"];
    const auto parameters = function.find("parameters");
    signatures.push_back({function["name"].get<std::string>(),
                          parameters == function.end() ? nlohmann::ordered_json() : *parameters});
  }
  text::ToolCallGrammar call = text::tool_call_grammar(format, signatures);
  for (const std::string& reason : call.loose) {
    log_warning("tool_choice: a call's arguments are not checked: {}", reason);
  }
  options.grammar = std::make_shared<const text::JsonGrammar>(std::move(call.grammar));
  for (const std::string& marker : text::tool_call_marker_texts(format)) {
    const std::optional<int32_t> id = tokenizer.piece_to_id(marker);
    if (id && tokenizer.is_special(*id)) options.grammar_tokens.push_back({*id, marker});
  }
}

}  // namespace tessera::server
