// Statements: {% if %}, {% for %}, {% set %}, {% macro %}, ... over the expression parser.
#include "text/jinja/parser.h"

#include <set>

#include "text/jinja/parser_internal.h"

namespace tessera::text::jinja {
namespace {

class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  std::vector<StmtPtr> parse_template() {
    std::vector<StmtPtr> body = parse_body({});
    if (current().kind != TokenKind::kEnd) fail(current(), "unexpected " + describe(current()));
    return body;
  }

 private:
  // ---- statements ----

  // Parses until a {% tag %} whose name is in `ends` (left unconsumed after the
  // "{%" and the name are checked), or the end of the template.
  std::vector<StmtPtr> parse_body(const std::set<std::string>& ends) {
    std::vector<StmtPtr> body;
    while (true) {
      const Token& token = current();
      if (token.kind == TokenKind::kEnd) {
        if (!ends.empty())
          fail(token, "unexpected end of template: missing {% " + *ends.rbegin() + " %}");
        return body;
      }
      if (token.kind == TokenKind::kData) {
        auto stmt = make_stmt(StmtKind::kData, token);
        stmt->text = token.text;
        body.push_back(std::move(stmt));
        advance();
      } else if (token.kind == TokenKind::kVariableBegin) {
        advance();
        auto stmt = make_stmt(StmtKind::kOutput, token);
        stmt->expr = parse_tuple();
        if (current().kind != TokenKind::kVariableEnd)
          fail(current(), "expected '}}' to end the expression, got " + describe(current()));
        advance();
        body.push_back(std::move(stmt));
      } else if (token.kind == TokenKind::kBlockBegin) {
        const Token& tag = peek();
        if (tag.kind != TokenKind::kName) fail(tag, "expected a tag name after '{%'");
        if (ends.count(tag.text)) return body;
        advance();
        body.push_back(parse_statement());
      } else {
        fail(token, "unexpected " + describe(token));
      }
    }
  }

  StmtPtr make_stmt(StmtKind kind, const Token& at) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = kind;
    stmt->line = at.line;
    stmt->column = at.column;
    return stmt;
  }

  // At the tag name after "{%".
  StmtPtr parse_statement() {
    const Token& tag = advance();
    const std::string& name = tag.text;
    if (name == "if") return parse_if(tag);
    if (name == "for") return parse_for(tag);
    if (name == "set") return parse_set(tag);
    if (name == "macro") return parse_macro(tag);
    if (name == "filter") return parse_filter_block(tag);
    if (name == "with") return parse_with(tag);
    if (name == "generation") {
      auto stmt = make_stmt(StmtKind::kScope, tag);
      expect_block_end(name);
      stmt->body = parse_body({"endgeneration"});
      end_tag("endgeneration");
      return stmt;
    }
    if (name == "break" || name == "continue") {
      auto stmt = make_stmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, tag);
      expect_block_end(name);
      return stmt;
    }
    static const std::set<std::string> kEndTags = {"endif", "elif", "else", "endfor", "endset",
                                                   "endmacro", "endfilter", "endwith", "endgeneration"};
    if (kEndTags.count(name)) fail(tag, "unexpected '" + name + "' tag: no open block it could close");
    fail(tag, "unknown tag '" + name + "' (this Jinja subset has if, for, set, macro, filter, with, "
              "generation, break, continue)");
  }

  // At "{%" of an end tag; consumes the whole tag.
  void end_tag(const char* name) {
    advance();  // {%
    advance();  // the name
    expect_block_end(name);
  }

  StmtPtr parse_if(const Token& tag) {
    auto stmt = make_stmt(StmtKind::kIf, tag);
    stmt->expr = parse_expression();
    expect_block_end("if");
    stmt->body = parse_body({"elif", "else", "endif"});
    advance();  // {%
    const Token& next = advance();
    if (next.text == "elif") {
      stmt->else_body.push_back(parse_if(next));
      return stmt;  // the nested if consumed the endif
    }
    if (next.text == "else") {
      expect_block_end("else");
      stmt->else_body = parse_body({"endif"});
      advance();
      advance();
    }
    expect_block_end("endif");
    return stmt;
  }

  std::vector<std::string> parse_targets(const char* context) {
    std::vector<std::string> targets;
    const bool paren = skip_op("(");
    do {
      targets.push_back(expect_name(context));
    } while (skip_op(","));
    if (paren) expect_op(")", context);
    return targets;
  }

  StmtPtr parse_for(const Token& tag) {
    auto stmt = make_stmt(StmtKind::kFor, tag);
    stmt->targets = parse_targets("as the loop variable");
    if (!skip_name("in")) fail(current(), "expected 'in' in the for loop, got " + describe(current()));
    stmt->expr = parse_tuple(/*with_condition=*/false);
    if (skip_name("if")) stmt->condition = parse_expression();
    if (is_name("recursive")) fail(current(), "recursive for loops are not supported");
    expect_block_end("for");
    stmt->body = parse_body({"else", "endfor"});
    if (peek().text == "else") {
      end_tag("else");
      stmt->else_body = parse_body({"endfor"});
    }
    end_tag("endfor");
    return stmt;
  }

  // A chain of "| name(args)" applied to the captured body.
  ExprPtr parse_capture_filters(const Token& at) {
    auto captured = std::make_unique<Expr>();
    captured->kind = ExprKind::kName;
    captured->name = kCapturedName;
    captured->line = at.line;
    captured->column = at.column;
    ExprPtr chain = std::move(captured);
    while (skip_op("|")) chain = parse_filter(std::move(chain));
    return chain;
  }

  StmtPtr parse_set(const Token& tag) {
    const std::string first = expect_name("after 'set'");
    if (skip_op(".")) {
      auto stmt = make_stmt(StmtKind::kSet, tag);
      stmt->targets = {first};
      stmt->attribute = expect_name("after '.' in the set target");
      expect_op("=", "in the set statement");
      stmt->expr = parse_tuple();
      expect_block_end("set");
      return stmt;
    }
    std::vector<std::string> targets = {first};
    while (skip_op(",")) targets.push_back(expect_name("in the set target"));
    if (skip_op("=")) {
      auto stmt = make_stmt(StmtKind::kSet, tag);
      stmt->targets = std::move(targets);
      stmt->expr = parse_tuple();
      expect_block_end("set");
      return stmt;
    }
    if (targets.size() != 1) fail(current(), "a block set assigns one name");
    auto stmt = make_stmt(StmtKind::kSetBlock, tag);
    stmt->targets = std::move(targets);
    stmt->filter = parse_capture_filters(tag);
    expect_block_end("set");
    stmt->body = parse_body({"endset"});
    end_tag("endset");
    return stmt;
  }

  StmtPtr parse_macro(const Token& tag) {
    auto stmt = make_stmt(StmtKind::kMacro, tag);
    stmt->name = expect_name("after 'macro'");
    expect_op("(", "after the macro name");
    while (!skip_op(")")) {
      if (!stmt->params.empty()) expect_op(",", "between macro parameters");
      if (skip_op(")")) break;
      std::string param = expect_name("as a macro parameter");
      ExprPtr default_value;
      if (skip_op("=")) default_value = parse_expression();
      stmt->params.emplace_back(std::move(param), std::move(default_value));
    }
    expect_block_end("macro");
    stmt->body = parse_body({"endmacro"});
    end_tag("endmacro");
    return stmt;
  }

  StmtPtr parse_filter_block(const Token& tag) {
    auto stmt = make_stmt(StmtKind::kFilterBlock, tag);
    auto captured = std::make_unique<Expr>();
    captured->kind = ExprKind::kName;
    captured->name = kCapturedName;
    stmt->filter = parse_filter(std::move(captured));
    while (skip_op("|")) stmt->filter = parse_filter(std::move(stmt->filter));
    expect_block_end("filter");
    stmt->body = parse_body({"endfilter"});
    end_tag("endfilter");
    return stmt;
  }

  StmtPtr parse_with(const Token& tag) {
    auto stmt = make_stmt(StmtKind::kWith, tag);
    while (current().kind != TokenKind::kBlockEnd) {
      if (!stmt->params.empty()) expect_op(",", "between with assignments");
      std::string target = expect_name("in the with statement");
      expect_op("=", "in the with statement");
      stmt->params.emplace_back(std::move(target), parse_expression());
    }
    expect_block_end("with");
    stmt->body = parse_body({"endwith"});
    end_tag("endwith");
    return stmt;
  }
};

}  // namespace

std::vector<StmtPtr> parse(const std::vector<Token>& tokens, const std::string& template_name) {
  return Parser(tokens, template_name).parse_template();
}

}  // namespace tessera::text::jinja
