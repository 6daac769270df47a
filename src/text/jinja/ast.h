// The syntax tree of a parsed template: expressions and statements.
//
// One node struct per family rather than a class per construct: the
// interpreter switches on the kind, and the children's meaning per kind is
// written next to the kind below.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace tessera::text::jinja {

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // children: items; negated: a tuple
  kDict,       // children: key0, value0, key1, value1, ...
  kGetAttr,    // children: [object]; name: the attribute (obj.name)
  kGetItem,    // children: [object, index] (obj[index])
  kSlice,      // children: [object, start, stop, step], each of the last three may be null
  kCall,       // children: [callee, positional...]; kwargs
  kFilter,     // children: [operand, positional...]; kwargs; name: the filter
  kTest,       // children: [operand, positional...]; kwargs; name: the test; negated
  kUnary,      // children: [operand]; name: "-" or "+"
  kNot,        // children: [operand]
  kBinary,     // children: [left, right]; name: "+", "-", "*", "/", "//", "%", "**"
  kAnd,        // children: [left, right]
  kOr,         // children: [left, right]
  kCompare,    // children: [first, operand...]; ops: "==", "<", "in", "notin", ...
  kCondition,  // children: [then, condition, else (may be null)]: `then if condition else else`
  kConcat,     // children: parts joined by ~
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;  // kTest: `is not`; kList: a tuple
};

enum class StmtKind {
  kData,         // text
  kOutput,       // {{ expr }}
  kIf,           // expr: condition; body; else_body (an elif is an If inside else_body)
  kFor,          // targets in expr [if condition]; body; else_body
  kSet,          // targets (or targets[0].attribute) = expr
  kSetBlock,     // {% set targets[0] [| filters] %}body{% endset %}; filter: chain over kCapturedName
  kMacro,        // name(params) body
  kFilterBlock,  // {% filter f %}body{% endfilter %}; filter: chain over kCapturedName
  kWith,         // {% with a = x, ... %}body{% endwith %}: params are the assignments
  kScope,        // body in the current scope ({% generation %} of transformers)
  kBreak,
  kContinue,
};

// The name a filter chain of kSetBlock / kFilterBlock applies to: the captured body.
inline constexpr const char* kCapturedName = "\x01" "captured";

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attribute;  // {% set ns.attribute = ... %}
  std::string name;       // macro name
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters (default may be null)
  std::vector<StmtPtr> body;
  std::vector<StmtPtr> else_body;
};

}  // namespace tessera::text::jinja
