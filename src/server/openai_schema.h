// The OpenAI request bodies tessera accepts, as typed structs.
//
// Parsing validates types and ranges and throws ApiError(400) naming the
// field ("param") for anything wrong, so handlers only see valid values.
// Unknown fields are ignored, as LMDeploy and vLLM do; fields whose meaning
// tessera cannot honour yet (suffix, response_format's regex_schema, schema
// keywords it cannot enforce) are refused with a message rather than
// silently ignored.
//
// Defaults follow LMDeploy's api_server (temperature 0.7, top_p 1.0, top_k 40;
// max_tokens 16 for /v1/completions as OpenAI has it, none for chat), so a
// client moving from LMDeploy sees the same sampling.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "text/chat_template.h"
#include "text/grammar_vocabulary.h"
#include "text/json_grammar.h"

namespace tessera::server {

// What chat and text completions share.
struct GenerationOptions {
  std::optional<int64_t> max_tokens;    // new tokens at most; none: until the session ends
  int64_t min_tokens = 0;
  engine::SamplingParams sampling;      // seed random unless `seed` was given
  bool seed_given = false;
  std::vector<std::string> stop;        // stop strings (excluded from the text)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool logprobs = false;
  int32_t top_logprobs = 0;             // 0..20
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  int32_t n = 1;                        // choices per prompt (1..kMaxChoices), each sampled with its own seed
  // Completions: candidates generated per prompt (n..kMaxChoices), of which the n with the
  // highest cumulative logprob are returned; more than n only without stream.
  int32_t best_of = 1;
  int32_t candidates() const { return best_of > n ? best_of : n; }
  bool echo = false;                    // completions: the prompt leads the text (and, with logprobs, is scored)
  // response_format json_object or json_schema: what every choice must be
  // (server/structured_output.h); null: free text.
  std::shared_ptr<const text::JsonGrammar> grammar;
  // Special tokens the grammar's markup writes (a forced tool call's markers), with their text.
  std::vector<text::GrammarToken> grammar_tokens;
};

// At most this many choices in one request (n times the prompts).
inline constexpr int64_t kMaxChoices = 128;

struct ChatCompletionRequest {
  std::string model;
  std::vector<text::ChatMessage> messages;  // at least one
  // The tools the prompt shows (checked; narrowed by tool_choice: none for
  // "none", the one named); absent when there are none.
  std::optional<nlohmann::ordered_json> tools;
  // tool_choice "required" or a named function: the answer must be a call.
  bool force_tool_call = false;
  bool add_generation_prompt = true;
  GenerationOptions options;
};

// One prompt of /v1/completions: text, or token ids.
struct CompletionPrompt {
  std::optional<std::string> text;  // one of the two
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  std::string model;
  std::vector<CompletionPrompt> prompts;  // at least one; choices come in this order, n each
  GenerationOptions options;
};

// LMDeploy's /v1/encode: {"input": str | [str], "do_preprocess": bool, "add_bos": bool}.
struct EncodeRequest {
  std::vector<std::string> inputs;
  bool batched = false;       // input was a list: the answer is lists too
  bool do_preprocess = false; // render each input as a user message through the chat template
  bool add_bos = true;
};

// Each throws ApiError(400) for malformed JSON, a wrong type or a value out of range.
ChatCompletionRequest parse_chat_completion_request(std::string_view body);
CompletionRequest parse_completion_request(std::string_view body);
EncodeRequest parse_encode_request(std::string_view body);

}  // namespace tessera::server
