// Structured output (response_format json_object / json_schema): the
// engine's TokenConstraint for one choice, over a JSON grammar and the
// tokenizer's bytes (text/grammar_vocabulary.h).
#pragma once

#include <memory>
#include <mutex>

#include "engine/token_constraint.h"
#include "server/openai_schema.h"
#include "text/grammar_vocabulary.h"
#include "text/json_grammar.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace tessera::server {

// The tokenizer's GrammarVocabulary, made at the first structured request
// (50-90 ms for InternLM2's and Qwen2's vocabularies) and kept.
class GrammarVocabularyCache {
 public:
  // Safe from many threads; the first call makes it, the others wait for it.
  std::shared_ptr<const text::GrammarVocabulary> get(const text::Tokenizer& tokenizer);

 private:
  std::once_flag once_;
  std::shared_ptr<const text::GrammarVocabulary> vocabulary_;
};

class JsonConstraint final : public engine::TokenConstraint {
 public:
  explicit JsonConstraint(text::JsonTokenMatcher matcher) : matcher_(std::move(matcher)) {}
  void allowed(std::span<uint64_t> allowed) const override { matcher_.allowed(allowed); }
  bool can_end() const override { return matcher_.can_end(); }
  bool done() const override { return matcher_.done(); }
  bool accept(int32_t id) override { return matcher_.accept(id); }

 private:
  text::JsonTokenMatcher matcher_;
};

// A fresh constraint for one choice. Throws ApiError(400) when no token of
// the vocabulary can start the output.
// `extra`: special tokens the grammar's markup writes; `pattern_masks`: the
// request's cache of pattern masks, shared by its choices (one of its own
// when null).
std::shared_ptr<engine::TokenConstraint> make_json_constraint(
    std::shared_ptr<const text::JsonGrammar> grammar, std::shared_ptr<const text::GrammarVocabulary> vocabulary,
    std::vector<text::GrammarToken> extra = {}, std::shared_ptr<text::PatternMaskCache> pattern_masks = nullptr);

// tool_choice "required" or a named function: sets `options`' grammar to
// one call of one of `tools` (OpenAI's [{"type": "function", "function":
// {"name", "parameters"}}]) in `format`'s markup, with the markers the
// vocabulary has as special tokens. A tool whose parameters schema is outside
// the structured output subset takes any object as arguments (logged).
void force_tool_call(text::ToolCallFormat format, const nlohmann::ordered_json& tools,
                     const text::Tokenizer& tokenizer, GenerationOptions& options);

}  // namespace tessera::server
