// Expression evaluation: names, literals, access, calls, operators, filters, tests.
#include "text/jinja/interpreter.h"

#include "core/error.h"
#include "text/jinja/lexer.h"

namespace tessera::text::jinja {
namespace {

// What an error message calls the failing expression.
std::string construct(const Expr& expr) {
  switch (expr.kind) {
    case ExprKind::kName: return "name '" + expr.name + "'";
    case ExprKind::kDict: return "dict literal";
    case ExprKind::kGetAttr: return "attribute '." + expr.name + "'";
    case ExprKind::kGetItem: return "subscript []";
    case ExprKind::kSlice: return "slice [:]";
    case ExprKind::kCall:
      if (expr.children[0]->kind == ExprKind::kName) return "call of '" + expr.children[0]->name + "'";
      if (expr.children[0]->kind == ExprKind::kGetAttr) return "call of '." + expr.children[0]->name + "()'";
      return "call";
    case ExprKind::kFilter: return "filter '" + expr.name + "'";
    case ExprKind::kTest: return "test '" + expr.name + "'";
    case ExprKind::kUnary: return "unary '" + expr.name + "'";
    case ExprKind::kBinary: return "operator '" + expr.name + "'";
    case ExprKind::kCompare: return "comparison";
    case ExprKind::kConcat: return "operator '~'";
    default: return "expression";
  }
}

Value compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Value(equals(a, b));
  if (op == "!=") return Value(!equals(a, b));
  if (op == "in") return Value(contains(b, a));
  if (op == "notin") return Value(!contains(b, a));
  const int order = compare(a, b);
  if (op == "<") return Value(order < 0);
  if (op == "<=") return Value(order <= 0);
  if (op == ">") return Value(order > 0);
  return Value(order >= 0);  // ">="
}

}  // namespace

Value Interpreter::eval(const Expr& expr, const ScopePtr& scope) {
  try {
    return eval_expr(expr, scope);
  } catch (const EvalError& e) {
    fail(expr.line, expr.column, construct(expr) + ": " + e.what());
  }
}

CallArgs Interpreter::eval_args(const Expr& expr, const ScopePtr& scope, size_t first) {
  CallArgs args;
  for (size_t i = first; i < expr.children.size(); ++i)
    args.positional.push_back(eval(*expr.children[i], scope));
  for (const auto& [key, value] : expr.kwargs) args.keyword.emplace_back(key, eval(*value, scope));
  return args;
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
  require_defined(callee);
  if (!callee.is_callable()) throw EvalError("'" + callee.type_name() + "' object is not callable");
  return callee.as_callable().call(args);
}

Value Interpreter::eval_expr(const Expr& expr, const ScopePtr& scope) {
  switch (expr.kind) {
    case ExprKind::kLiteral: return expr.literal;
    case ExprKind::kName: {
      if (const Value* value = scope->lookup(expr.name)) return *value;
      return Value::undefined("'" + expr.name + "' is undefined");
    }
    case ExprKind::kList: {
      List items;
      for (const auto& child : expr.children) items.push_back(eval(*child, scope));
      return expr.negated ? Value::tuple(std::move(items)) : Value(std::move(items));
    }
    case ExprKind::kDict: {
      Map map;
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        const Value key = eval(*expr.children[i], scope);
        if (!key.is_string())
          throw EvalError("dict keys must be strings here, got " + key.type_name());
        map.set(key.as_string(), eval(*expr.children[i + 1], scope));
      }
      return Value(std::move(map));
    }
    case ExprKind::kGetAttr: return get_attr(eval(*expr.children[0], scope), expr.name);
    case ExprKind::kGetItem:
      return get_item(eval(*expr.children[0], scope), eval(*expr.children[1], scope));
    case ExprKind::kSlice: {
      const Value object = eval(*expr.children[0], scope);
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        if (expr.children[i + 1]) parts[i] = eval(*expr.children[i + 1], scope);
      return slice(object, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall: {
      const Value callee = eval(*expr.children[0], scope);
      return call(callee, eval_args(expr, scope, 1));
    }
    case ExprKind::kFilter: {
      const Value operand = eval(*expr.children[0], scope);
      return apply_filter(expr.name, operand, eval_args(expr, scope, 1));
    }
    case ExprKind::kTest: {
      const Value operand = eval(*expr.children[0], scope);
      const bool result = apply_test(expr.name, operand, eval_args(expr, scope, 1));
      return Value(expr.negated ? !result : result);
    }
    case ExprKind::kUnary: {
      const Value operand = eval(*expr.children[0], scope);
      require_defined(operand);
      if (!operand.is_number())
        throw EvalError("bad operand type for unary " + expr.name + ": '" + operand.type_name() + "'");
      if (expr.name == "+") return operand.is_bool() ? Value(operand.as_int()) : operand;
      if (operand.is_float()) return Value(-operand.as_double());
      return Value(-operand.as_int());
    }
    case ExprKind::kNot: return Value(!eval(*expr.children[0], scope).truthy());
    case ExprKind::kBinary:
      return arithmetic(expr.name, eval(*expr.children[0], scope), eval(*expr.children[1], scope));
    case ExprKind::kAnd: {
      Value left = eval(*expr.children[0], scope);
      return left.truthy() ? eval(*expr.children[1], scope) : left;
    }
    case ExprKind::kOr: {
      Value left = eval(*expr.children[0], scope);
      return left.truthy() ? left : eval(*expr.children[1], scope);
    }
    case ExprKind::kCompare: {
      Value left = eval(*expr.children[0], scope);
      for (size_t i = 0; i < expr.ops.size(); ++i) {
        Value right = eval(*expr.children[i + 1], scope);
        if (!compare_op(expr.ops[i], left, right).truthy()) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kCondition: {
      if (eval(*expr.children[1], scope).truthy()) return eval(*expr.children[0], scope);
      if (expr.children[2]) return eval(*expr.children[2], scope);
      return Value::undefined("the conditional expression had no else branch");
    }
    case ExprKind::kConcat: {
      std::string out;
      for (const auto& child : expr.children) out += to_str(eval(*child, scope));
      return Value(std::move(out));
    }
  }
  throw EvalError("unknown expression");
}

}  // namespace tessera::text::jinja
