#include "cli/answer_markup.h"

#include <fmt/format.h>

#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "text/reasoning.h"
#include "text/tool_calls.h"

namespace tessera::cli {

namespace {

std::optional<text::ToolCallFormat> tool_call_parser_option(const std::string& name) {
  if (name.empty()) return std::nullopt;
  std::optional<text::ToolCallFormat> format = text::tool_call_format_from_name(name);
  if (!format) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--tool-call-parser {}: no such parser", name),
                "use one of " + text::tool_call_format_names() + ", or leave it out to pick by the model's vocabulary");
  }
  return format;
}

std::optional<text::ReasoningFormat> reasoning_parser_option(const std::string& name) {
  if (name.empty()) return std::nullopt;
  std::optional<text::ReasoningFormat> format = text::reasoning_format_from_name(name);
  if (!format) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--reasoning-parser {}: no such parser", name),
                "use one of " + text::reasoning_format_names());
  }
  return format;
}

// How requests with tools are served: the markup their answers' calls are
// read from (the flag's, else the one whose marker tokens the vocabulary
// has), the template that renders the tools (the chat template where it
// reads them; for InternLM2 markup, whose models ship a template that does
// not, the built-in internlm2 one, as LMDeploy renders them), and the token
// that ends an InternLM2 call (a stop word of LMDeploy's internlm2 template).
void set_up_tool_calls(const std::string& parser, const ServingModel& model, server::ServingContext& context) {
  const text::Tokenizer& tokenizer = *model.tokenizer;
  std::optional<text::ToolCallFormat> format = tool_call_parser_option(parser);
  if (format && !text::tokenizer_has_tool_call_markers(tokenizer, *format)) {
    log_warning("--tool-call-parser {}: the vocabulary has no tokens for its markers; this model may never write "
                "calls in that markup",
                parser);
  }
  if (!format) format = text::detect_tool_call_format(tokenizer);
  context.tool_call_format = format;
  context.tool_keeps_special = format && text::tool_call_markers_are_special(tokenizer, *format);
  if (model.chat_template->renders_tools()) {
    context.tools_template = model.chat_template;
  } else if (format == text::ToolCallFormat::kInternLM) {
    context.tools_template = text::ChatTemplate::builtin("internlm2");
  }
  if (format == text::ToolCallFormat::kInternLM) {
    if (std::optional<int32_t> end = tokenizer.piece_to_id("<|action_end|>")) context.tool_stop_ids.push_back(*end);
  }
  const std::string rendered_by =
      !context.tools_template ? std::string("refused: the chat template does not render tools (see --chat-template)")
      : context.tools_template->name() == model.chat_template->name()
          ? "rendered by the chat template"
          : fmt::format("rendered by the built-in {} template (the chat template {} does not render tools)",
                        context.tools_template->name(), model.chat_template->name());
  if (format) {
    log_info("tool calls: answers are read in {} markup{}; requests with tools are {}",
             text::tool_call_format_name(*format), parser.empty() ? " (from the vocabulary; --tool-call-parser)" : "",
             rendered_by);
  } else {
    log_info("tool calls: no markup in the vocabulary, answers stay text (--tool-call-parser {}); requests with "
             "tools are {}",
             text::tool_call_format_names(), rendered_by);
  }
}

}  // namespace

void check_answer_markup_options(const std::string& tool_call_parser, const std::string& reasoning_parser) {
  tool_call_parser_option(tool_call_parser);
  reasoning_parser_option(reasoning_parser);
}

void set_up_answer_markup(const std::string& tool_call_parser, const std::string& reasoning_parser,
                          const ServingModel& model, server::ServingContext& context) {
  set_up_tool_calls(tool_call_parser, model, context);
  context.reasoning_format = reasoning_parser_option(reasoning_parser);
  if (context.reasoning_format) {
    context.reasoning_keeps_special = text::reasoning_tags_are_special(*model.tokenizer, *context.reasoning_format);
    log_info("reasoning: chat answers' text before </think> is reasoning_content (--reasoning-parser {}){}",
             reasoning_parser, context.reasoning_keeps_special ? "; special tokens stay in the text" : "");
  }
}

}  // namespace tessera::cli
