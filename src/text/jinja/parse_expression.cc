// Expressions, loosest first as in jinja2/parser.py: conditional, or, and,
// not, comparisons, + -, ~, * / // %, **, unary, then postfix and filters.
#include "text/jinja/parser_internal.h"

namespace tessera::text::jinja {

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

ExprPtr ExpressionParser::node(ExprKind kind, const Token& at) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->line = at.line;
  expr->column = at.column;
  return expr;
}

ExprPtr ExpressionParser::binary(ExprKind kind, const Token& at, ExprPtr left, ExprPtr right, std::string op) {
  auto expr = node(kind, at);
  expr->name = std::move(op);
  expr->children.push_back(std::move(left));
  expr->children.push_back(std::move(right));
  return expr;
}

// `a, b` is a tuple (a list here) where jinja2 allows one: {{ }}, set, for.
ExprPtr ExpressionParser::parse_tuple(bool with_condition) {
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

ExprPtr ExpressionParser::parse_expression() {
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

ExprPtr ExpressionParser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const Token& at = advance();
    left = binary(ExprKind::kOr, at, std::move(left), parse_and());
  }
  return left;
}

ExprPtr ExpressionParser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const Token& at = advance();
    left = binary(ExprKind::kAnd, at, std::move(left), parse_not());
  }
  return left;
}

ExprPtr ExpressionParser::parse_not() {
  if (is_name("not")) {
    const Token& at = advance();
    auto expr = node(ExprKind::kNot, at);
    expr->children.push_back(parse_not());
    return expr;
  }
  return parse_compare();
}

ExprPtr ExpressionParser::parse_compare() {
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

ExprPtr ExpressionParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& at = advance();
    left = binary(ExprKind::kBinary, at, std::move(left), parse_concat(), at.text);
  }
  return left;
}

ExprPtr ExpressionParser::parse_concat() {
  const Token& at = current();
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto concat = node(ExprKind::kConcat, at);
  concat->children.push_back(std::move(first));
  while (skip_op("~")) concat->children.push_back(parse_math2());
  return concat;
}

ExprPtr ExpressionParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& at = advance();
    left = binary(ExprKind::kBinary, at, std::move(left), parse_pow(), at.text);
  }
  return left;
}

ExprPtr ExpressionParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const Token& at = advance();
    left = binary(ExprKind::kBinary, at, std::move(left), parse_unary(true), "**");
  }
  return left;
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
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

ExprPtr ExpressionParser::parse_primary() {
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

ExprPtr ExpressionParser::parse_postfix(ExprPtr expr) {
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

ExprPtr ExpressionParser::parse_subscript(ExprPtr object) {
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
void ExpressionParser::parse_call_args(Expr& expr) {
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

ExprPtr ExpressionParser::parse_call(ExprPtr callee) {
  auto call = node(ExprKind::kCall, current());
  call->children.push_back(std::move(callee));
  parse_call_args(*call);
  return call;
}

std::string ExpressionParser::dotted_name(const char* context) {
  std::string name = expect_name(context);
  while (skip_op(".")) name.append(".").append(expect_name(context));
  return name;
}

// After '|'.
ExprPtr ExpressionParser::parse_filter(ExprPtr operand) {
  auto filter = node(ExprKind::kFilter, current());
  filter->name = dotted_name("as the filter name after '|'");
  filter->children.push_back(std::move(operand));
  if (is_op("(")) parse_call_args(*filter);
  return filter;
}

ExprPtr ExpressionParser::parse_filter_chain(ExprPtr expr) {
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

ExprPtr ExpressionParser::parse_test(ExprPtr operand) {
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

}  // namespace tessera::text::jinja
