// The expression half of the parser (parse_expression.cc), which the
// statement parser (parser.cc) extends. Internal to the jinja folder.
#pragma once

#include <string>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace tessera::text::jinja {

std::string describe(const Token& token);

class ExpressionParser {
 public:
  ExpressionParser(const std::vector<Token>& tokens, const std::string& name) : tokens_(tokens), name_(name) {}

 protected:
  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& advance() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool is_op(const char* op) const {
    return current().kind == TokenKind::kOperator && current().text == op;
  }
  bool is_name(const char* name) const {
    return current().kind == TokenKind::kName && current().text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(const Token& at, const std::string& message) const {
    throw_template_error(name_, at.line, at.column, message);
  }

  void expect_op(const char* op, const char* context) {
    if (!skip_op(op))
      fail(current(), std::string("expected '") + op + "' " + context + ", got " + describe(current()));
  }
  std::string expect_name(const char* context) {
    if (current().kind != TokenKind::kName)
      fail(current(), std::string("expected a name ") + context + ", got " + describe(current()));
    return advance().text;
  }
  void expect_block_end(const std::string& tag) {
    if (current().kind != TokenKind::kBlockEnd)
      fail(current(), "expected '%}' to end the '" + tag + "' tag, got " + describe(current()));
    advance();
  }

  ExprPtr node(ExprKind kind, const Token& at);
  ExprPtr binary(ExprKind kind, const Token& at, ExprPtr left, ExprPtr right, std::string op = {});
  ExprPtr parse_tuple(bool with_condition = true);
  ExprPtr parse_expression();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr expr);
  ExprPtr parse_subscript(ExprPtr object);
  void parse_call_args(Expr& expr);
  ExprPtr parse_call(ExprPtr callee);
  std::string dotted_name(const char* context);
  ExprPtr parse_filter(ExprPtr operand);
  ExprPtr parse_filter_chain(ExprPtr expr);
  ExprPtr parse_test(ExprPtr operand);

  const std::vector<Token>& tokens_;
  const std::string& name_;
  size_t pos_ = 0;
};

}  // namespace tessera::text::jinja
