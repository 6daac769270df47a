// Server-sent events as OpenAI streams them: each event is one line
// "data: <json>" followed by a blank line, and the stream ends with
// "data: [DONE]". JSON is written on one line (newlines inside strings are
// escaped), so an event never spans lines.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tessera::server {

std::string sse_event(const nlohmann::ordered_json& data);
std::string sse_done();

// One-line JSON; invalid UTF-8 (which tessera's text never holds) is replaced, never thrown on.
std::string dump_json(const nlohmann::ordered_json& data);

}  // namespace tessera::server
