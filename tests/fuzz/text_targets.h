// What the text layer must survive, as functions of arbitrary bytes: shared by
// the libFuzzer target (text_fuzzer.cc) and the seeded randomized test
// (tests/text/text_robustness_test.cc).
//
// Each function feeds its input to one part of src/text. A tessera::Error is
// an accepted outcome (bad input is refused); any other exception, a crash,
// or a broken property (check() throws std::logic_error) is a bug: libFuzzer
// reports the uncaught exception, the test fails on it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/chat_template.h"
#include "text/incremental_detokenizer.h"
#include "text/reasoning.h"
#include "text/stop_strings.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"
#include "text/utf8.h"

namespace tessera::text::fuzz {

inline void check(bool condition, const std::string& what) {
  if (!condition) throw std::logic_error("property broken: " + what);
}

// Runs `body`; a tessera::Error is fine, everything else propagates.
template <typename Body>
void refused_or_ok(Body&& body) {
  try {
    body();
  } catch (const Error&) {
  }
}

// Encode: invalid UTF-8 may be refused; valid UTF-8 must encode, to ids that
// decode to valid UTF-8.
inline void encode_bytes(const Tokenizer& tokenizer, std::string_view bytes) {
  const bool valid = is_valid_utf8(bytes);
  for (const bool add_special : {false, true}) {
    std::vector<int32_t> ids;
    try {
      ids = tokenizer.encode(bytes, add_special);
    } catch (const Error&) {
      check(!valid, "valid UTF-8 was refused by encode");
      continue;
    }
    for (const int32_t id : ids) check(id >= 0 && id < tokenizer.vocab_size(), "encode gave an id out of range");
    for (const bool skip : {false, true}) check(is_valid_utf8(tokenizer.decode(ids, skip)), "decode gave invalid UTF-8");
  }
}

// Ids from bytes: three bytes each, spread over the vocabulary, the byte
// pieces, the specials near the end, and ids with no piece (negative, past
// the end, the int32 extremes).
inline std::vector<int32_t> ids_from_bytes(const Tokenizer& tokenizer, std::string_view bytes) {
  const int32_t size = tokenizer.vocab_size();
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 3 <= bytes.size(); i += 3) {
    const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + k])); };
    const uint32_t value = (b(1) << 8) | b(2);
    switch (b(0) % 8) {
      case 0: case 1: ids.push_back(static_cast<int32_t>(value % static_cast<uint32_t>(size))); break;
      case 2: case 3: ids.push_back(static_cast<int32_t>(value % 259)); break;  // control and byte pieces
      case 4: ids.push_back(std::max(0, size - 1 - static_cast<int32_t>(value % 64))); break;
      case 5: ids.push_back(static_cast<int32_t>((value << 8 | b(0)) % static_cast<uint32_t>(size))); break;
      case 6: ids.push_back(size + static_cast<int32_t>(value % 1000)); break;
      default: {
        const int32_t odd[] = {-1, -2, INT32_MIN, INT32_MAX, size, -static_cast<int32_t>(value)};
        ids.push_back(odd[value % std::size(odd)]);
      }
    }
  }
  return ids;
}

// Decode and the incremental detokenizer: never refuse, always valid UTF-8,
// and streaming one id at a time joins to decode(all ids).
inline void decode_ids(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  for (const bool skip : {false, true}) {
    const std::string full = tokenizer.decode(ids, skip);
    check(is_valid_utf8(full), "decode gave invalid UTF-8");
    IncrementalDetokenizer stream(tokenizer, skip);
    std::string joined;
    for (const int32_t id : ids) {
      const std::string piece = stream.push(id);
      check(is_valid_utf8(piece), "the detokenizer handed out invalid UTF-8");
      joined += piece;
    }
    joined += stream.finish();
    check(joined == full, "streamed text differs from decode");
  }
}

// Stop strings: bytes split into stop strings and chunks by 0x00 and 0x01.
// Without a match the output is the whole text; with one it is the text up to
// an occurrence of the stop string it names.
inline void stop_strings(std::string_view bytes) {
  std::vector<std::string> stops;
  std::vector<std::string> chunks;
  std::string current;
  bool in_stops = true;
  for (const char c : bytes) {
    if (c == '\0' || c == '\1') {
      (in_stops ? stops : chunks).push_back(current);
      current.clear();
      if (c == '\1') in_stops = false;
    } else {
      current.push_back(c);
    }
  }
  (in_stops ? stops : chunks).push_back(current);
  if (stops.size() > 8) stops.resize(8);

  StopStringMatcher matcher(stops);
  std::string text;
  std::string out;
  for (const std::string& chunk : chunks) {
    text += chunk;
    const StopStringMatcher::Result result = matcher.feed(chunk);
    out += result.text;
    if (matcher.stopped()) {
      check(result.stop_index.has_value() && *result.stop_index < stops.size(), "stop_index out of range");
      break;
    }
  }
  if (!matcher.stopped()) {
    out += matcher.finish();
    check(out == text, "no stop string matched but the text changed");
    for (const std::string& stop : stops) check(stop.empty() || text.find(stop) == std::string::npos, "missed a stop");
  } else {
    const std::string& stop = stops[*matcher.stop_index()];
    check(!stop.empty(), "stopped on an empty stop string");
    check(text.compare(0, out.size(), out) == 0, "output is not a prefix of the text");
    check(text.compare(out.size(), stop.size(), stop) == 0, "the stop string does not follow the output");
  }
}

// An answer's markup: the first byte picks the tool-call format, the rest is
// the answer, cut into streamed chunks at 0x01. Tool calls: the streamed
// content is always a prefix of the text, and content plus calls at the end
// equal the whole-answer parse, whose content is the text itself when there
// are no calls and a prefix of it otherwise. Reasoning: streamed equals split.
inline void answer_markup(std::string_view bytes) {
  if (bytes.empty()) return;
  const auto format = static_cast<ToolCallFormat>(static_cast<unsigned char>(bytes[0]) % 4);
  std::vector<std::string> chunks(1);
  for (const char c : bytes.substr(1)) {
    if (c == '\1') {
      chunks.emplace_back();
    } else {
      chunks.back().push_back(c);
    }
  }
  std::string text;
  for (const std::string& chunk : chunks) text += chunk;

  const ToolCallText whole = parse_tool_calls(format, text);
  check(whole.calls.empty() ? whole.content == text : text.starts_with(whole.content), "parsed content");
  for (const ToolCall& call : whole.calls) check(!call.name.empty(), "a call without a name");
  ToolCallStream calls(format);
  std::string content;
  for (const std::string& chunk : chunks) {
    content += calls.feed(chunk);
    check(text.starts_with(content), "streamed content is not a prefix of the answer");
  }
  const ToolCallText rest = calls.finish();
  content += rest.content;
  check(content == whole.content, "streamed content differs from the whole parse");
  check(rest.calls.size() == whole.calls.size(), "streamed calls differ from the whole parse");
  for (size_t i = 0; i < rest.calls.size(); ++i) {
    check(rest.calls[i].name == whole.calls[i].name && rest.calls[i].arguments == whole.calls[i].arguments,
          "a streamed call differs from the whole parse");
  }

  const ReasoningText split = split_reasoning(ReasoningFormat::kThinkTags, text);
  ReasoningStream thinking(ReasoningFormat::kThinkTags);
  ReasoningText streamed;
  for (const std::string& chunk : chunks) {
    const ReasoningText piece = thinking.feed(chunk);
    streamed.reasoning += piece.reasoning;
    streamed.content += piece.content;
  }
  const ReasoningText last = thinking.finish();
  check(streamed.reasoning + last.reasoning == split.reasoning, "streamed reasoning differs from the split");
  check(streamed.content + last.content == split.content, "streamed content differs from the split");
}

// Jinja: compile the bytes as a template and render a short conversation.
inline void render_template(std::string_view source) {
  refused_or_ok([&] {
    const ChatTemplate tmpl = ChatTemplate::from_source(source, "fuzz");
    ChatTemplateInput input;
    input.messages = {ChatMessage::from_json({{"role", "system"}, {"content", "Be brief."}}),
                      ChatMessage::from_json({{"role", "user"}, {"content", "Hi <s> \xe8\xae\xb2"}}),
                      ChatMessage::from_json({{"role", "assistant"}, {"content", nullptr},
                                              {"tool_calls", nlohmann::ordered_json::parse(
                                                  R"([{"id": "c1", "type": "function", "function":
                                                      {"name": "f", "arguments": "{\"x\": 1}"}}])")}}),
                      ChatMessage::from_json({{"role", "tool"}, {"content", "42"}, {"tool_call_id", "c1"}})};
    input.bos_token = "<s>";
    input.eos_token = "</s>";
    input.tools = nlohmann::ordered_json::parse(
        R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
    std::tm now{};
    now.tm_year = 124;
    input.now = now;
    tmpl.render(input);
  });
}

}  // namespace tessera::text::fuzz
