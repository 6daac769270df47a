// Statements: output, if, for, set, macro, filter/with blocks, break/continue.
#include "text/jinja/interpreter.h"

#include "text/jinja/lexer.h"

namespace tessera::text::jinja {

const Value* Scope::lookup(std::string_view name) const {
  for (const Scope* scope = this; scope; scope = scope->parent_.get())
    if (const Value* value = scope->vars_.find(name)) return value;
  return nullptr;
}

void require_defined(const Value& value) {
  if (value.is_undefined()) throw EvalError(value.undefined_message());
}

namespace {

constexpr int kMaxCallDepth = 256;

// A {% macro %}: called with positional and keyword arguments, missing ones
// take their default (evaluated at call time) or are undefined; returns its output.
class Macro : public Callable {
 public:
  Macro(const Stmt& stmt, std::weak_ptr<Scope> scope, Interpreter& interpreter)
      : stmt_(stmt), scope_(std::move(scope)), interpreter_(interpreter) {}

  Value call(const CallArgs& args) const override {
    const ScopePtr parent = scope_.lock();
    if (!parent) throw EvalError("macro '" + stmt_.name + "' called after its template finished");
    if (args.positional.size() > stmt_.params.size())
      throw EvalError("macro '" + stmt_.name + "' takes not more than " +
                      std::to_string(stmt_.params.size()) + " argument(s)");
    for (const auto& [key, value] : args.keyword) {
      bool known = false;
      for (const auto& param : stmt_.params) known = known || param.first == key;
      if (!known) throw EvalError("macro '" + stmt_.name + "' takes no keyword argument '" + key + "'");
    }
    if (interpreter_.call_depth >= kMaxCallDepth)
      throw EvalError("macro '" + stmt_.name + "': recursion deeper than " +
                      std::to_string(kMaxCallDepth) + " calls");
    auto scope = std::make_shared<Scope>(parent);
    for (size_t i = 0; i < stmt_.params.size(); ++i) {
      const auto& [param, default_value] = stmt_.params[i];
      if (const Value* given = args.get(i, param)) {
        scope->set(param, *given);
      } else if (default_value) {
        scope->set(param, interpreter_.eval(*default_value, scope));
      } else {
        scope->set(param, Value::undefined("'" + param + "' is undefined (macro '" + stmt_.name +
                                           "' called without it)"));
      }
    }
    std::string out;
    ++interpreter_.call_depth;
    try {
      interpreter_.exec(stmt_.body, scope, out);
    } catch (...) {
      --interpreter_.call_depth;
      throw;
    }
    --interpreter_.call_depth;
    return Value(std::move(out));
  }

  std::string name() const override { return stmt_.name; }

 private:
  const Stmt& stmt_;
  std::weak_ptr<Scope> scope_;
  Interpreter& interpreter_;
};

Value loop_info(const List& items, size_t index) {
  const auto n = static_cast<int64_t>(items.size());
  const auto i = static_cast<int64_t>(index);
  Map loop;
  loop.set("index", Value(i + 1));
  loop.set("index0", Value(i));
  loop.set("revindex", Value(n - i));
  loop.set("revindex0", Value(n - i - 1));
  loop.set("first", Value(i == 0));
  loop.set("last", Value(i == n - 1));
  loop.set("length", Value(n));
  loop.set("depth", Value(1));
  loop.set("depth0", Value(0));
  if (i > 0) loop.set("previtem", items[index - 1]);
  if (i + 1 < n) loop.set("nextitem", items[index + 1]);
  return Value(std::move(loop));
}

void bind_targets(Scope& scope, const std::vector<std::string>& targets, const Value& value) {
  if (targets.size() == 1) {
    scope.set(targets[0], value);
    return;
  }
  const List items = iterate(value.is_undefined() ? Value(List{}) : value);
  if (value.is_undefined() || items.size() != targets.size())
    throw EvalError(items.size() < targets.size()
                        ? "not enough values to unpack (expected " + std::to_string(targets.size()) +
                              ", got " + std::to_string(items.size()) + ")"
                        : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
}

}  // namespace

void Interpreter::fail(int line, int column, const std::string& message) const {
  throw_template_error(name_, line, column, message);
}

std::string Interpreter::render(const std::vector<StmtPtr>& body, const Map& variables) {
  auto globals = std::make_shared<Scope>(nullptr);
  Map builtins;
  add_builtin_globals(builtins);
  for (const auto& [key, value] : builtins.entries()) globals->set(key, value);
  for (const auto& [key, value] : variables.entries()) globals->set(key, value);
  auto root = std::make_shared<Scope>(globals);
  std::string out;
  const Flow flow = exec(body, root, out);
  if (flow != Flow::kNormal) fail(0, 0, "'break' or 'continue' outside a for loop");
  macro_scopes_.clear();
  return out;
}

Flow Interpreter::exec(const std::vector<StmtPtr>& body, const ScopePtr& scope, std::string& out) {
  for (const auto& stmt : body) {
    const Flow flow = exec_stmt(*stmt, scope, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Flow Interpreter::exec_stmt(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
  switch (stmt.kind) {
    case StmtKind::kData: out += stmt.text; return Flow::kNormal;
    case StmtKind::kOutput: out += to_str(eval(*stmt.expr, scope)); return Flow::kNormal;
    case StmtKind::kIf:
      return exec(eval(*stmt.expr, scope).truthy() ? stmt.body : stmt.else_body, scope, out);
    case StmtKind::kFor: return exec_for(stmt, scope, out);
    case StmtKind::kSet: exec_set(stmt, scope); return Flow::kNormal;
    case StmtKind::kSetBlock:
    case StmtKind::kFilterBlock: {
      auto inner = std::make_shared<Scope>(scope);
      std::string captured;
      if (exec(stmt.body, inner, captured) != Flow::kNormal)
        fail(stmt.line, stmt.column, "'break' or 'continue' inside a block");
      inner->set(kCapturedName, Value(std::move(captured)));
      Value result = eval(*stmt.filter, inner);
      if (stmt.kind == StmtKind::kSetBlock) scope->set(stmt.targets[0], std::move(result));
      else out += to_str(result);
      return Flow::kNormal;
    }
    case StmtKind::kMacro: {
      macro_scopes_.push_back(scope);
      scope->set(stmt.name, Value(std::shared_ptr<const Callable>(
                                std::make_shared<Macro>(stmt, scope, *this))));
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>(scope);
      for (const auto& [target, value] : stmt.params) inner->set(target, eval(*value, scope));
      return exec(stmt.body, inner, out);
    }
    case StmtKind::kScope: return exec(stmt.body, scope, out);
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

Flow Interpreter::exec_for(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
  const Value iterable = eval(*stmt.expr, scope);
  List items;
  try {
    items = iterate(iterable);
  } catch (const EvalError& e) {
    fail(stmt.expr->line, stmt.expr->column, std::string("for loop: ") + e.what());
  }
  if (stmt.condition) {  // {% for x in xs if cond %}: loop.* count the kept items only
    List kept;
    for (const Value& item : items) {
      auto probe = std::make_shared<Scope>(scope);
      try {
        bind_targets(*probe, stmt.targets, item);
      } catch (const EvalError& e) {
        fail(stmt.line, stmt.column, std::string("for loop: ") + e.what());
      }
      if (eval(*stmt.condition, probe).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    auto iteration = std::make_shared<Scope>(scope);
    try {
      bind_targets(*iteration, stmt.targets, items[i]);
    } catch (const EvalError& e) {
      fail(stmt.line, stmt.column, std::string("for loop: ") + e.what());
    }
    iteration->set("loop", loop_info(items, i));
    if (exec(stmt.body, iteration, out) == Flow::kBreak) break;
  }
  if (items.empty()) return exec(stmt.else_body, std::make_shared<Scope>(scope), out);
  return Flow::kNormal;
}

void Interpreter::exec_set(const Stmt& stmt, const ScopePtr& scope) {
  Value value = eval(*stmt.expr, scope);
  if (!stmt.attribute.empty()) {
    const Value* target = scope->lookup(stmt.targets[0]);
    if (!target || !target->is_namespace())
      fail(stmt.line, stmt.column,
           "set " + stmt.targets[0] + "." + stmt.attribute +
               ": cannot assign an attribute of a non-namespace object");
    target->namespace_map().set(stmt.attribute, std::move(value));
    return;
  }
  try {
    bind_targets(*scope, stmt.targets, value);
  } catch (const EvalError& e) {
    fail(stmt.line, stmt.column, std::string("set: ") + e.what());
  }
}

}  // namespace tessera::text::jinja
