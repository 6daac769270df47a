// Interpreter: renders a parsed template over a Map of variables.
//
// Scoping follows jinja2: a for loop's body gets a fresh scope per iteration
// (so `set` inside a loop does not leak out — templates use namespace() for
// that), a macro call gets a scope whose parent is the scope the macro was
// defined in (names resolve at call time, so macros may call macros defined
// later and themselves), and if/elif/else bodies share the enclosing scope.
//
// Errors: an operation that fails throws EvalError; the interpreter turns it
// into Error(kInvalidArgument) naming the template, the line and column of the
// expression or statement, and the construct ("filter 'tojson'", "for loop").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace tessera::text::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* lookup(std::string_view name) const;
  void set(std::string name, Value value) { vars_.set(std::move(name), std::move(value)); }

 private:
  std::shared_ptr<Scope> parent_;
  Map vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  explicit Interpreter(const std::string& template_name) : name_(template_name) {}

  // Renders `body` with `variables` (over the built-in globals range, dict, namespace).
  std::string render(const std::vector<StmtPtr>& body, const Map& variables);

  Value eval(const Expr& expr, const ScopePtr& scope);

  // For filters and tests that apply other filters and tests (map, select, ...).
  Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args);
  bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);

  // Calls a macro, a global function or a bound method.
  Value call(const Value& callee, const CallArgs& args);

  const std::string& template_name() const { return name_; }

  // Runs `body`, appending its output; called by macros.
  Flow exec(const std::vector<StmtPtr>& body, const ScopePtr& scope, std::string& out);

  int call_depth = 0;  // macro recursion guard

 private:
  Value eval_expr(const Expr& expr, const ScopePtr& scope);
  Flow exec_stmt(const Stmt& stmt, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Stmt& stmt, const ScopePtr& scope, std::string& out);
  void exec_set(const Stmt& stmt, const ScopePtr& scope);
  CallArgs eval_args(const Expr& expr, const ScopePtr& scope, size_t first);
  [[noreturn]] void fail(int line, int column, const std::string& message) const;

  const std::string& name_;
  // Scopes macros were defined in: kept alive until the render ends (macros
  // hold them weakly, so a macro stored in its own scope is not a cycle).
  std::vector<ScopePtr> macro_scopes_;
};

// ---- operations shared by the interpreter, filters and methods (operations.cc) ----

// jinja2's sandboxed getattr (obj.name) and getitem (obj[key]): a missing
// attribute or key is undefined; any access on undefined throws EvalError.
Value get_attr(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
// Python's iter(): list items, dict keys, string characters; undefined is empty.
List iterate(const Value& value);
// Python's len(); throws for values without one.
int64_t length(const Value& value);
// `item in container`.
bool contains(const Value& container, const Value& item);
// Python's <: -1, 0, 1; throws for unordered types.
int compare(const Value& a, const Value& b);
Value arithmetic(const std::string& op, const Value& a, const Value& b);
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// Bound methods of str, dict and list (methods.cc); undefined when `name` is not one.
Value find_method(const Value& object, const std::string& name);
// The globals jinja2 provides: range, dict, namespace.
void add_builtin_globals(Map& globals);

// Whether the filter / test exists (filters.cc); templates are checked when parsed.
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

// Throws EvalError unless `value` is defined (jinja2's Undefined fails when used).
void require_defined(const Value& value);

}  // namespace tessera::text::jinja
