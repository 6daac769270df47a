// Value: the data a Jinja template computes with, with Python's semantics.
//
// Chat templates are written for Python's jinja2, so every operation here
// follows what Python does with the same objects: str() and repr() of numbers,
// lists and dicts, truthiness, == across int/float/bool, dicts that keep their
// insertion order, and jinja2's default Undefined (renders as "", is falsy,
// iterates as empty, and fails when used in arithmetic or indexed).
//
// Lists and maps are immutable once built (the sandbox chat templates run in
// forbids mutating them), so they are shared by pointer. A namespace() is the
// one mutable object and has reference semantics, as in jinja2.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::text::jinja {

class Value;
using List = std::vector<Value>;

// An insertion-ordered string-keyed dictionary (linear lookup: template maps are small).
class Map {
 public:
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);  // replaces in place or appends
  size_t size() const;  // out of line: Value is incomplete here (clang with libstdc++ refuses)
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

// Arguments of a call: f(a, b, key=c).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index`, else the keyword `name`, else nullptr.
  const Value* get(size_t index, std::string_view name) const;
};

// A macro, a global function or a bound method.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual Value call(const CallArgs& args) const = 0;
  virtual std::string name() const = 0;
};

enum class ValueKind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kMap,
  kNamespace,
  kCallable,
};

class Value {
 public:
  Value() = default;  // undefined
  explicit Value(bool b) : kind_(ValueKind::kBool), data_(b) {}
  explicit Value(int64_t i) : kind_(ValueKind::kInt), data_(i) {}
  explicit Value(int i) : Value(static_cast<int64_t>(i)) {}
  explicit Value(double d) : kind_(ValueKind::kFloat), data_(d) {}
  explicit Value(std::string s) : kind_(ValueKind::kString), data_(std::move(s)) {}
  explicit Value(const char* s) : Value(std::string(s)) {}
  explicit Value(List list);
  explicit Value(Map map);
  explicit Value(std::shared_ptr<const Callable> callable);

  static Value none();
  // `what` names the missing thing for error messages, e.g. "'foo' is undefined".
  static Value undefined(std::string what);
  static Value make_namespace(Map initial);
  // A list that Python would hold as a tuple: str() writes (a, b); equal only to tuples.
  static Value tuple(List items);
  bool is_tuple() const { return tuple_; }

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // bool is an int in Python
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }
  bool is_map() const { return kind_ == ValueKind::kMap; }
  bool is_namespace() const { return kind_ == ValueKind::kNamespace; }
  bool is_callable() const { return kind_ == ValueKind::kCallable; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;    // int or bool
  double as_double() const;  // int, bool or float
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(data_); }
  const Map& as_map() const { return *std::get<std::shared_ptr<Map>>(data_); }  // map or namespace
  Map& namespace_map() const { return *std::get<std::shared_ptr<Map>>(data_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  // For an undefined value: what is missing ("'x' is undefined").
  std::string undefined_message() const;

  // Python's truthiness (undefined is false).
  bool truthy() const;
  // Python's type name, for error messages: 'str', 'int', 'dict', 'NoneType', ...
  std::string type_name() const;

 private:
  ValueKind kind_ = ValueKind::kUndefined;
  bool tuple_ = false;
  std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<const List>,
               std::shared_ptr<Map>, std::shared_ptr<const Callable>>
      data_;
};

// Python's str(): what {{ value }} renders. Undefined renders as "".
std::string to_str(const Value& value);
// Python's repr(): strings quoted as Python quotes them.
std::string to_repr(const Value& value);
// Python's repr() of a float: "1.0", "0.1", "1e+16", "inf".
std::string float_repr(double value);

// Python's ==, deep, dict order ignored; 1 == 1.0 == True.
bool equals(const Value& a, const Value& b);

// Builds a value from JSON, keeping object key order.
Value from_json(const nlohmann::ordered_json& json);

struct JsonDumpOptions {
  std::optional<int> indent;  // json.dumps(indent=N); none: one line
  std::string item_separator = ", ";  // json.dumps uses "," when indenting
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
// Python's json.dumps(value, ...) as transformers' tojson filter calls it.
// Throws EvalError for values JSON cannot hold (undefined, callables, namespaces).
std::string dump_json(const Value& value, const JsonDumpOptions& options);

// An evaluation failure without a position; the interpreter adds the line and construct.
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A Callable made from a lambda.
class Function : public Callable {
 public:
  using Body = std::function<Value(const CallArgs&)>;
  Function(std::string name, Body body) : name_(std::move(name)), body_(std::move(body)) {}
  Value call(const CallArgs& args) const override { return body_(args); }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  Body body_;
};

Value make_function(std::string name, Function::Body body);

}  // namespace tessera::text::jinja
