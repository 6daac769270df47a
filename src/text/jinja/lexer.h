// Lexer: template source to tokens, with jinja2's whitespace rules.
//
// Text between tags becomes data tokens; inside {{ }} and {% %} the
// expression tokens follow. Whitespace control is applied here, as jinja2's
// lexer does it: "{%-"/"-%}" strip all whitespace on that side, trim_blocks
// drops the first newline after a block or comment tag, lstrip_blocks drops
// spaces and tabs before a block or comment tag that starts a line, "+"
// disables both. Like jinja2 (keep_trailing_newline=False), a single
// trailing newline of the source is dropped and \r\n / \r become \n.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text::jinja {

enum class TokenKind {
  kData,           // literal template text
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,  // text holds the decoded value
  kInteger,
  kFloat,
  kOperator,  // text holds the operator: "==", "(", "|", ...
  kEnd,       // end of the template
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int line = 0;
  int column = 0;
  int64_t int_value = 0;
  double float_value = 0;
};

struct LexerOptions {
  bool trim_blocks = true;    // transformers renders chat templates with both on
  bool lstrip_blocks = true;
};

// Throws Error(kInvalidArgument) naming `template_name`, the line and the column.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options,
                            const std::string& template_name);

// Throws Error(kInvalidArgument): "<template_name>: line L, column C: <message>".
[[noreturn]] void throw_template_error(const std::string& template_name, int line, int column,
                                       const std::string& message);

}  // namespace tessera::text::jinja
