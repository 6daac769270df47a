// Request parsing and validation: every malformed or out-of-range body is an
// ApiError(400) naming the field, never a crash or a silently wrong value.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/openai_schema.h"

namespace tessera::server {
namespace {

// The status and param of the ApiError `parse` throws; fails the test when it does not throw.
template <typename Parse>
std::pair<unsigned, std::string> refusal(Parse parse, const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    auto json = nlohmann::json::parse(e.body());
    EXPECT_TRUE(json["error"].contains("message") && json["error"].contains("type") &&
                json["error"].contains("param") && json["error"].contains("code"))
        << e.body();
    return {e.status(), e.param().value_or("")};
  }
  ADD_FAILURE() << "accepted: " << body;
  return {0, ""};
}

auto chat = [](const std::string& b) { return parse_chat_completion_request(b); };
auto completion = [](const std::string& b) { return parse_completion_request(b); };

const char* kMessages = R"("messages": [{"role": "user", "content": "hi"}])";

std::string chat_body(const std::string& extra) {
  return std::string("{\"model\": \"m\", ") + kMessages + (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(serverSchema, ChatDefaultsFollowLmdeploy) {
  ChatCompletionRequest r = parse_chat_completion_request(chat_body(""));
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_FALSE(r.options.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.options.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(r.options.sampling.top_p, 1.0f);
  EXPECT_EQ(r.options.sampling.top_k, 40);
  EXPECT_FALSE(r.options.stream);
  EXPECT_TRUE(r.options.skip_special_tokens);
  EXPECT_FALSE(r.options.seed_given);
}

TEST(serverSchema, ChatReadsEveryField) {
  ChatCompletionRequest r = parse_chat_completion_request(chat_body(
      R"("max_tokens": 5, "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3, "min_p": 0.1,
         "repetition_penalty": 1.2, "presence_penalty": -1, "frequency_penalty": 2, "seed": 42, "stop": ["a", "b"],
         "stop_token_ids": [2, 3], "ignore_eos": true, "skip_special_tokens": false, "logprobs": true,
         "top_logprobs": 4, "stream": true, "stream_options": {"include_usage": true}, "n": 1, "user": "x")"));
  EXPECT_EQ(r.options.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(r.options.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.options.sampling.top_p, 0.5f);
  EXPECT_EQ(r.options.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(r.options.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.options.sampling.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(r.options.sampling.presence_penalty, -1.0f);
  EXPECT_EQ(r.options.sampling.seed, 42u);
  EXPECT_TRUE(r.options.seed_given);
  EXPECT_EQ(r.options.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.options.stop_token_ids, (std::vector<int32_t>{2, 3}));
  EXPECT_TRUE(r.options.ignore_eos);
  EXPECT_FALSE(r.options.skip_special_tokens);
  EXPECT_TRUE(r.options.logprobs);
  EXPECT_EQ(r.options.top_logprobs, 4);
  EXPECT_TRUE(r.options.stream);
  EXPECT_TRUE(r.options.include_usage);
}

TEST(serverSchema, LogitBiasMapsTokenIdsToBiases) {
  const auto bias = parse_chat_completion_request(chat_body(R"("logit_bias": {"7": -100, "42": 2.5})"))
                        .options.sampling.logit_bias;
  ASSERT_EQ(bias.size(), 2u);
  std::map<int32_t, float> by_id(bias.begin(), bias.end());
  EXPECT_EQ(by_id.at(7), -100.0f);
  EXPECT_EQ(by_id.at(42), 2.5f);
  EXPECT_TRUE(parse_chat_completion_request(chat_body(R"("logit_bias": {})")).options.sampling.logit_bias.empty());
}

TEST(serverSchema, StopMayBeOneString) {
  EXPECT_EQ(parse_chat_completion_request(chat_body(R"("stop": "END")")).options.stop,
            std::vector<std::string>{"END"});
}

TEST(serverSchema, NullMeansAbsent) {
  ChatCompletionRequest r = parse_chat_completion_request(chat_body(R"("temperature": null, "stop": null)"));
  EXPECT_FLOAT_EQ(r.options.sampling.temperature, 0.7f);
  EXPECT_TRUE(r.options.stop.empty());
}

TEST(serverSchema, MalformedJsonIs400) {
  for (const char* body : {"", "{", "{\"model\": }", "[1, 2]", "\"text\"", "{\"a\": 1} trailing", "\xff\xfe"}) {
    EXPECT_EQ(refusal(chat, body).first, 400u) << body;
  }
}

TEST(serverSchema, InvalidUtf8InAStringIs400) {
  EXPECT_EQ(refusal(chat, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}").first,
            400u);
}

TEST(serverSchema, WrongTypesName400WithTheField) {
  struct Case {
    std::string extra, param;
  };
  for (const Case& c : std::vector<Case>{{R"("temperature": "hot")", "temperature"},
                                         {R"("max_tokens": 1.5)", "max_tokens"},
                                         {R"("max_tokens": "10")", "max_tokens"},
                                         {R"("stream": 1)", "stream"},
                                         {R"("stop": 5)", "stop"},
                                         {R"("stop": [1])", "stop"},
                                         {R"("stop_token_ids": [-1])", "stop_token_ids"},
                                         {R"("stop_token_ids": "x")", "stop_token_ids"},
                                         {R"("seed": "x")", "seed"},
                                         {R"("logprobs": 1)", "logprobs"},
                                         {R"("stream_options": true)", "stream_options"},
                                         {R"("top_k": true)", "top_k"}}) {
    auto [status, param] = refusal(chat, chat_body(c.extra));
    EXPECT_EQ(status, 400u) << c.extra;
    EXPECT_EQ(param, c.param) << c.extra;
  }
}

TEST(serverSchema, OutOfRangeValuesAre400) {
  for (const char* extra : {R"("temperature": -0.1)", R"("temperature": 2.5)", R"("top_p": 0)", R"("top_p": 1.01)",
                            R"("max_tokens": 0)", R"("max_tokens": -5)", R"("max_tokens": 1e300)",
                            R"("max_tokens": 99999999999999999999999)", R"("presence_penalty": 3)",
                            R"("min_p": 2)", R"("repetition_penalty": 0)", R"("top_logprobs": 21)",
                            R"("top_logprobs": 2)", R"("n": 0)", R"("n": 129)", R"("top_k": -2)",
                            R"("logit_bias": {"1": 101})", R"("logit_bias": {"1x": 5})",
                            R"("logit_bias": {"": 5})", R"("logit_bias": [1])",
                            R"("response_format": {"type": "json_schema"})",
                            R"("response_format": {"type": "regex_schema", "regex_schema": 5})",
                            R"x("response_format": {"type": "regex_schema", "regex_schema": "(?=a)"})x",
                            R"("structured_outputs": {"regex": "a", "json": {}})"}) {
    EXPECT_EQ(refusal(chat, chat_body(extra)).first, 400u) << extra;
  }
}

TEST(serverSchema, MessagesAreChecked) {
  for (const char* body : {R"({"model": "m"})", R"({"model": "m", "messages": []})",
                           R"({"model": "m", "messages": "hi"})", R"({"model": "m", "messages": [1]})",
                           R"({"model": "m", "messages": [{"content": "hi"}]})",
                           R"({"model": "m", "messages": [{"role": "wizard", "content": "hi"}]})",
                           R"({"model": "m", "messages": [{"role": 7, "content": "hi"}]})",
                           R"({"model": "m", "messages": [{"role": "user", "content": 7}]})",
                           R"({"messages": [{"role": "user", "content": "hi"}]})"}) {
    EXPECT_EQ(refusal(chat, body).first, 400u) << body;
  }
}

TEST(serverSchema, CompletionPromptShapes) {
  auto prompts = [](const char* body) { return parse_completion_request(body).prompts; };
  CompletionRequest text = parse_completion_request(R"({"model": "m", "prompt": "Once"})");
  ASSERT_EQ(text.prompts.size(), 1u);
  EXPECT_EQ(text.prompts[0].text, "Once");
  EXPECT_EQ(text.options.max_tokens, 16);  // OpenAI's and LMDeploy's default for completions
  EXPECT_EQ(prompts(R"({"model": "m", "prompt": ["Once"]})").at(0).text, "Once");
  EXPECT_EQ(prompts(R"({"model": "m", "prompt": [1, 2, 3]})").at(0).ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(prompts(R"({"model": "m", "prompt": [[4, 5]]})").at(0).ids, (std::vector<int32_t>{4, 5}));
  // Several prompts: a list of strings, or of id lists, in order.
  const auto texts = prompts(R"({"model": "m", "prompt": ["a", "b", "c"]})");
  ASSERT_EQ(texts.size(), 3u);
  EXPECT_EQ(texts[2].text, "c");
  const auto id_lists = prompts(R"({"model": "m", "prompt": [[1], [2, 3]]})");
  ASSERT_EQ(id_lists.size(), 2u);
  EXPECT_EQ(id_lists[1].ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(parse_completion_request(R"({"model": "m", "prompt": "x", "n": 4})").options.n, 4);
  const GenerationOptions best = parse_completion_request(R"({"model": "m", "prompt": "x", "n": 2, "best_of": 5})").options;
  EXPECT_EQ(best.candidates(), 5);
  EXPECT_EQ(parse_completion_request(R"({"model": "m", "prompt": "x", "n": 3})").options.candidates(), 3);
  CompletionRequest lp = parse_completion_request(R"({"model": "m", "prompt": "x", "logprobs": 3})");
  EXPECT_TRUE(lp.options.logprobs);
  EXPECT_EQ(lp.options.top_logprobs, 3);
  for (const char* body : {R"({"model": "m"})", R"({"model": "m", "prompt": 5})", R"({"model": "m", "prompt": []})",
                           R"({"model": "m", "prompt": ["a", [1]]})", R"({"model": "m", "prompt": [[1], "a"]})",
                           R"({"model": "m", "prompt": [[1], []]})", R"({"model": "m", "prompt": ["a", 5]})",
                           R"({"model": "m", "prompt": [1, "a"]})",
                           R"({"model": "m", "prompt": [1.5]})", R"({"model": "m", "prompt": "x", "echo": 1})",
                           R"({"model": "m", "prompt": "x", "logprobs": true})",
                           R"({"model": "m", "prompt": "x", "n": 3, "best_of": 2})",
                           R"({"model": "m", "prompt": "x", "best_of": 3, "stream": true})",
                           R"({"model": "m", "prompt": ["a", "b"], "best_of": 65})",
                           R"({"model": "m", "prompt": "x", "best_of": 0})",
                           R"({"model": "m", "prompt": ["a", "b", "c"], "n": 50})",
                           R"({"model": "m", "prompt": "x", "n": 129})"}) {
    EXPECT_EQ(refusal(completion, body).first, 400u) << body;
  }
}

TEST(serverSchema, EncodeRequest) {
  EncodeRequest one = parse_encode_request(R"({"input": "hi"})");
  EXPECT_FALSE(one.batched);
  EXPECT_TRUE(one.add_bos);
  EncodeRequest many = parse_encode_request(R"({"input": ["a", "b"], "add_bos": false, "do_preprocess": true})");
  EXPECT_TRUE(many.batched);
  EXPECT_EQ(many.inputs.size(), 2u);
  EXPECT_FALSE(many.add_bos);
  EXPECT_TRUE(many.do_preprocess);
  auto encode = [](const std::string& b) { return parse_encode_request(b); };
  EXPECT_EQ(refusal(encode, R"({"input": 3})").first, 400u);
  EXPECT_EQ(refusal(encode, R"({"input": [3]})").first, 400u);
  EXPECT_EQ(refusal(encode, R"({})").first, 400u);
}

TEST(serverSchema, ErrorBodyHasOpenAiShape) {
  ApiError e(404, "no such model", "invalid_request_error", "model", "model_not_found");
  auto json = nlohmann::json::parse(e.body());
  EXPECT_EQ(json["error"]["message"], "no such model");
  EXPECT_EQ(json["error"]["type"], "invalid_request_error");
  EXPECT_EQ(json["error"]["param"], "model");
  EXPECT_EQ(json["error"]["code"], "model_not_found");
  auto plain = nlohmann::json::parse(error_body(413, "too big"));
  EXPECT_TRUE(plain["error"]["param"].is_null());
  EXPECT_TRUE(plain["error"]["code"].is_null());
}

}  // namespace
}  // namespace tessera::server
