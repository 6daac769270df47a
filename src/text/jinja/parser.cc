#include "text/jinja/parser.h"

#include <initializer_list>
#include <set>

namespace tessera::text::jinja {
namespace {

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::kData: return "template text";
    case TokenKind::kVariableBegin: return "'{{'";
    case TokenKind::kVariableEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kName: return "name '" + token.text + "'";
    case TokenKind::kString: return "string literal";
    case TokenKind::kInteger:
    case TokenKind::kFloat: return "number " + token.text;
    case TokenKind::kOperator: return "'" + token.text + "'";
    case TokenKind::kEnd: return "end of template";
  }
  return "token";
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : tokens_(tokens), name_(name) {}

  std::vector<StmtPtr> parse_template() {
    std::vector<StmtPtr> body = parse_body({});
    if (current().kind != TokenKind::kEnd) fail(current(), "unexpected " + describe(current()));
    return body;
  }

 private:
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

  // ---- expressions ----

  ExprPtr node(ExprKind kind, const Token& at) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = at.line;
    expr->column = at.column;
    return expr;
  }

  ExprPtr binary(ExprKind kind, const Token& at, ExprPtr left, ExprPtr right, std::string op = {}) {
    auto expr = node(kind, at);
    expr->name = std::move(op);
    expr->children.push_back(std::move(left));
    expr->children.push_back(std::move(right));
    return expr;
  }

  // `a, b` is a tuple (a list here) where jinja2 allows one: {{ }}, set, for.
  ExprPtr parse_tuple(bool with_condition = true) {
    const Token& at = current();
    ExprPtr first = with_condition ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto tuple = node(ExprKind::kList, at);
    tuple->negated = true;  // a tuple
    tuple->children.push_back(std::move(first));
    while (skip_op(",")) {
      if (current().kind == TokenKind::kBlockEnd || current().kind == TokenKind::kVariableEnd) break;
      tuple->children.push_back(with_condition ? parse_expression() : parse_or());
    }
    return tuple;
  }

  ExprPtr parse_expression() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const Token& at = advance();
      auto condition = node(ExprKind::kCondition, at);
      condition->children.push_back(std::move(expr));
      condition->children.push_back(parse_or());
      condition->children.push_back(skip_name("else") ? parse_expression() : nullptr);
      expr = std::move(condition);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token& at = advance();
      left = binary(ExprKind::kOr, at, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token& at = advance();
      left = binary(ExprKind::kAnd, at, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& at = advance();
      auto expr = node(ExprKind::kNot, at);
      expr->children.push_back(parse_not());
      return expr;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = current();
    ExprPtr first = parse_math1();
    ExprPtr compare;
    while (true) {
      std::string op;
      if (current().kind == TokenKind::kOperator &&
          (current().text == "==" || current().text == "!=" || current().text == "<" ||
           current().text == "<=" || current().text == ">" || current().text == ">=")) {
        op = advance().text;
      } else if (is_name("in")) {
        advance();
        op = "in";
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        advance();
        advance();
        op = "notin";
      } else {
        break;
      }
      if (!compare) {
        compare = node(ExprKind::kCompare, at);
        compare->children.push_back(std::move(first));
      }
      compare->ops.push_back(op);
      compare->children.push_back(parse_math1());
    }
    return compare ? std::move(compare) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = advance();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_concat(), at.text);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Token& at = current();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto concat = node(ExprKind::kConcat, at);
    concat->children.push_back(std::move(first));
    while (skip_op("~")) concat->children.push_back(parse_math2());
    return concat;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = advance();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_pow(), at.text);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = advance();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_unary(true), "**");
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr expr;
    if (is_op("-") || is_op("+")) {
      const Token& at = advance();
      expr = node(ExprKind::kUnary, at);
      expr->name = at.text;
      expr->children.push_back(parse_unary(false));
    } else {
      expr = parse_primary();
    }
    expr = parse_postfix(std::move(expr));
    if (with_filter) expr = parse_filter_chain(std::move(expr));
    return expr;
  }

  ExprPtr parse_primary() {
    const Token& token = current();
    switch (token.kind) {
      case TokenKind::kName: {
        advance();
        const std::string& n = token.text;
        auto literal = node(ExprKind::kLiteral, token);
        if (n == "true" || n == "True") literal->literal = Value(true);
        else if (n == "false" || n == "False") literal->literal = Value(false);
        else if (n == "none" || n == "None") literal->literal = Value::none();
        else {
          auto name = node(ExprKind::kName, token);
          name->name = n;
          return name;
        }
        return literal;
      }
      case TokenKind::kString: {
        std::string text = advance().text;
        while (current().kind == TokenKind::kString) text += advance().text;  // "a" "b"
        auto literal = node(ExprKind::kLiteral, token);
        literal->literal = Value(std::move(text));
        return literal;
      }
      case TokenKind::kInteger:
      case TokenKind::kFloat: {
        advance();
        auto literal = node(ExprKind::kLiteral, token);
        literal->literal = token.kind == TokenKind::kInteger ? Value(token.int_value)
                                                             : Value(token.float_value);
        return literal;
      }
      case TokenKind::kOperator:
        if (token.text == "(") {
          advance();
          if (skip_op(")")) {
            auto empty = node(ExprKind::kList, token);
            empty->negated = true;  // ()
            return empty;
          }
          ExprPtr inner = parse_expression();
          if (is_op(",")) {
            auto tuple = node(ExprKind::kList, token);
            tuple->negated = true;  // a tuple
            tuple->children.push_back(std::move(inner));
            while (skip_op(",")) {
              if (is_op(")")) break;
              tuple->children.push_back(parse_expression());
            }
            inner = std::move(tuple);
          }
          expect_op(")", "to close the parenthesis");
          return inner;
        }
        if (token.text == "[") {
          advance();
          auto list = node(ExprKind::kList, token);
          while (!skip_op("]")) {
            if (!list->children.empty()) expect_op(",", "between list items");
            if (skip_op("]")) break;
            list->children.push_back(parse_expression());
          }
          return list;
        }
        if (token.text == "{") {
          advance();
          auto dict = node(ExprKind::kDict, token);
          while (!skip_op("}")) {
            if (!dict->children.empty()) expect_op(",", "between dict items");
            if (skip_op("}")) break;
            dict->children.push_back(parse_expression());
            expect_op(":", "between a dict key and its value");
            dict->children.push_back(parse_expression());
          }
          return dict;
        }
        break;
      default: break;
    }
    fail(token, "unexpected " + describe(token) + " in an expression");
  }

  ExprPtr parse_postfix(ExprPtr expr) {
    while (true) {
      if (is_op(".")) {
        const Token& at = advance();
        auto attr = node(ExprKind::kGetAttr, at);
        if (current().kind == TokenKind::kInteger) {  // x.0 is x[0]
          attr->kind = ExprKind::kGetItem;
          auto index = node(ExprKind::kLiteral, current());
          index->literal = Value(advance().int_value);
          attr->children.push_back(std::move(expr));
          attr->children.push_back(std::move(index));
        } else {
          attr->name = expect_name("after '.'");
          attr->children.push_back(std::move(expr));
        }
        expr = std::move(attr);
      } else if (is_op("[")) {
        expr = parse_subscript(std::move(expr));
      } else if (is_op("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const Token& at = advance();  // [
    ExprPtr parts[3];
    int colons = 0;
    while (!is_op("]")) {
      if (skip_op(":")) {
        if (++colons > 2) fail(at, "a slice has at most two ':'");
        continue;
      }
      if (parts[colons]) fail(current(), "expected ']' or ':' in the subscript, got " + describe(current()));
      parts[colons] = parse_expression();
    }
    advance();  // ]
    if (colons == 0) {
      if (!parts[0]) fail(at, "empty subscript []");
      auto item = node(ExprKind::kGetItem, at);
      item->children.push_back(std::move(object));
      item->children.push_back(std::move(parts[0]));
      return item;
    }
    auto slice = node(ExprKind::kSlice, at);
    slice->children.push_back(std::move(object));
    for (auto& part : parts) slice->children.push_back(std::move(part));
    return slice;
  }

  // Arguments "(a, b, key=c)" into expr's children (after those it has) and kwargs.
  void parse_call_args(Expr& expr) {
    expect_op("(", "to open the argument list");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",", "between arguments");
      first = false;
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**")) fail(current(), "*args and **kwargs in calls are not supported");
      if (current().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
        std::string key = advance().text;
        advance();
        expr.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!expr.kwargs.empty()) fail(current(), "a positional argument follows a keyword argument");
        expr.children.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = node(ExprKind::kCall, current());
    call->children.push_back(std::move(callee));
    parse_call_args(*call);
    return call;
  }

  std::string dotted_name(const char* context) {
    std::string name = expect_name(context);
    while (skip_op(".")) name += "." + expect_name(context);
    return name;
  }

  // After '|'.
  ExprPtr parse_filter(ExprPtr operand) {
    auto filter = node(ExprKind::kFilter, current());
    filter->name = dotted_name("as the filter name after '|'");
    filter->children.push_back(std::move(operand));
    if (is_op("(")) parse_call_args(*filter);
    return filter;
  }

  ExprPtr parse_filter_chain(ExprPtr expr) {
    while (true) {
      if (skip_op("|")) {
        expr = parse_filter(std::move(expr));
      } else if (is_name("is")) {
        expr = parse_test(std::move(expr));
      } else if (is_op("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_test(ExprPtr operand) {
    advance();  // is
    auto test = node(ExprKind::kTest, current());
    test->negated = skip_name("not");
    test->name = dotted_name("as the test name after 'is'");
    test->children.push_back(std::move(operand));
    const Token& next = current();
    if (is_op("(")) {
      parse_call_args(*test);
    } else if ((next.kind == TokenKind::kName || next.kind == TokenKind::kString ||
                next.kind == TokenKind::kInteger || next.kind == TokenKind::kFloat ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(next, "tests cannot be chained with 'is'");
      test->children.push_back(parse_postfix(parse_primary()));
    }
    return test;
  }

  const std::vector<Token>& tokens_;
  const std::string& name_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<StmtPtr> parse(const std::vector<Token>& tokens, const std::string& template_name) {
  return Parser(tokens, template_name).parse_template();
}

}  // namespace tessera::text::jinja
