// tessera_chat_template: a test program that renders chat templates with
// tessera's Jinja interpreter, for tests/python/test_chat_templates.py, which
// compares the result with Python's jinja2 rendering the same request.
//
//   tessera_chat_template              stdin: one request; stdout: the rendered text
//                                      (nothing added); on an error, the message on
//                                      stderr and exit status 1
//   tessera_chat_template --batch      stdin: a JSON array of requests; stdout: a JSON
//                                      array of {"text": ...} or {"error": ...}
//   tessera_chat_template --print-builtin NAME   the built-in template's Jinja source
//
// A request: {"template": JINJA SOURCE | "builtin": NAME | "model_dir": DIR,
//             "messages": [...], "add_generation_prompt": bool, "bos_token": str,
//             "eos_token": str, "tools": [...] (optional), "extra": {...} (optional),
//             "now": "YYYY-MM-DD HH:MM:SS" (optional, fixes strftime_now)}
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/chat_template.h"
#include "text/chat_templates_builtin.h"

namespace {

using nlohmann::ordered_json;
using tessera::text::ChatTemplate;

std::string render(const ordered_json& request) {
  std::optional<ChatTemplate> chat_template;
  if (request.contains("template")) {
    chat_template = ChatTemplate::from_source(request["template"].get<std::string>(), "'request'");
  } else if (request.contains("builtin")) {
    chat_template = ChatTemplate::builtin(request["builtin"].get<std::string>());
  } else if (request.contains("model_dir")) {
    chat_template = ChatTemplate::find_in_model_dir(request["model_dir"].get<std::string>());
    if (!chat_template) throw tessera::Error(tessera::ErrorKind::kInvalidArgument, "no chat template in the model directory");
  } else {
    throw tessera::Error(tessera::ErrorKind::kInvalidArgument, "request needs template, builtin or model_dir");
  }
  tessera::text::ChatTemplateInput input;
  for (const auto& message : request.value("messages", ordered_json::array()))
    input.messages.push_back(tessera::text::ChatMessage::from_json(message));
  input.add_generation_prompt = request.value("add_generation_prompt", false);
  input.bos_token = request.value("bos_token", "");
  input.eos_token = request.value("eos_token", "");
  if (request.contains("tools") && !request["tools"].is_null()) input.tools = request["tools"];
  if (request.contains("extra")) input.extra = request["extra"];
  if (request.contains("now")) {
    std::tm now{};
    const std::string text = request["now"].get<std::string>();
    if (std::sscanf(text.c_str(), "%d-%d-%d %d:%d:%d", &now.tm_year, &now.tm_mon, &now.tm_mday,
                    &now.tm_hour, &now.tm_min, &now.tm_sec) != 6)
      throw tessera::Error(tessera::ErrorKind::kInvalidArgument, "now must be YYYY-MM-DD HH:MM:SS");
    now.tm_year -= 1900;
    now.tm_mon -= 1;
    std::mktime(&now);  // fills in the weekday and day of the year
    input.now = now;
  }
  return chat_template->render(input);
}

std::string describe(const std::exception& e) {
  if (const auto* error = dynamic_cast<const tessera::Error*>(&e))
    return std::string(tessera::error_kind_name(error->kind())) + ": " + error->message();
  return e.what();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--print-builtin" && argc > 2) {
    for (const auto& entry : tessera::text::builtin_chat_templates())
      if (std::string(argv[2]) == entry.name) {
        std::cout << entry.source;
        return 0;
      }
    std::cerr << "unknown built-in chat template " << argv[2] << "\n";
    return 1;
  }
  try {
    const std::string text{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    const ordered_json input = ordered_json::parse(text);
    if (mode == "--batch") {
      ordered_json results = ordered_json::array();
      for (const auto& request : input) {
        try {
          results.push_back({{"text", render(request)}});
        } catch (const std::exception& e) {
          results.push_back({{"error", describe(e)}});
        }
      }
      std::cout << results.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
      return 0;
    }
    std::cout << render(input);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "tessera_chat_template: " << describe(e) << "\n";
    return 1;
  }
}
