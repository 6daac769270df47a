// Python's semantics for access, iteration and operators on Values.
#include <cmath>
#include <limits>

#include "text/jinja/interpreter.h"
#include "text/jinja/unicode.h"

namespace tessera::text::jinja {
namespace {

Value missing(const Value& object, const std::string& what) {
  return Value::undefined(std::string("'").append(object.type_name()).append(" object' has no attribute ").append(what));
}

// A Python index into `size` elements, or -1 when out of range.
int64_t normalize_index(int64_t index, size_t size) {
  const auto n = static_cast<int64_t>(size);
  if (index < 0) index += n;
  return (index < 0 || index >= n) ? -1 : index;
}

}  // namespace

Value get_attr(const Value& object, const std::string& name) {
  require_defined(object);
  if (object.is_map()) {
    // Python's getattr first: d.items is the method even when d has an "items" key.
    if (Value method = find_method(object, name); !method.is_undefined()) return method;
    if (const Value* value = object.as_map().find(name)) return *value;
    return missing(object, "'" + name + "'");
  }
  if (object.is_namespace()) {
    if (const Value* value = object.as_map().find(name)) return *value;
    return missing(object, "'" + name + "'");
  }
  if (Value method = find_method(object, name); !method.is_undefined()) return method;
  return missing(object, "'" + name + "'");
}

Value get_item(const Value& object, const Value& key) {
  require_defined(object);
  if (object.is_map() && key.is_string()) {
    if (const Value* value = object.as_map().find(key.as_string())) return *value;
  } else if (object.is_list() && (key.is_int() || key.is_bool())) {
    const int64_t index = normalize_index(key.as_int(), object.as_list().size());
    if (index >= 0) return object.as_list()[static_cast<size_t>(index)];
    return Value::undefined("list index " + std::to_string(key.as_int()) + " is out of range");
  } else if (object.is_string() && (key.is_int() || key.is_bool())) {
    const std::u32string codes = decode_utf8(object.as_string());
    const int64_t index = normalize_index(key.as_int(), codes.size());
    if (index >= 0) return Value(encode_utf8(codes.substr(static_cast<size_t>(index), 1)));
    return Value::undefined("string index " + std::to_string(key.as_int()) + " is out of range");
  }
  // jinja2 falls back to the attribute of that name (d['items'] is the method too).
  if (key.is_string()) return get_attr(object, key.as_string());
  return missing(object, std::string("[").append(to_repr(key)).append("]"));
}

List iterate(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined: return {};
    case ValueKind::kList: return value.as_list();
    case ValueKind::kMap: {
      List keys;
      for (const auto& entry : value.as_map().entries()) keys.emplace_back(entry.first);
      return keys;
    }
    case ValueKind::kString: {
      List chars;
      for (const char32_t c : decode_utf8(value.as_string()))
        chars.emplace_back(encode_utf8(std::u32string(1, c)));
      return chars;
    }
    default: throw EvalError("'" + value.type_name() + "' object is not iterable");
  }
}

int64_t length(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined: return 0;
    case ValueKind::kString: return static_cast<int64_t>(decode_utf8(value.as_string()).size());
    case ValueKind::kList: return static_cast<int64_t>(value.as_list().size());
    case ValueKind::kMap: return static_cast<int64_t>(value.as_map().size());
    default: throw EvalError("object of type '" + value.type_name() + "' has no len()");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kUndefined: return false;
    case ValueKind::kString:
      require_defined(item);
      if (!item.is_string())
        throw EvalError("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& element : container.as_list())
        if (equals(element, item)) return true;
      return false;
    case ValueKind::kMap:
      return item.is_string() && container.as_map().find(item.as_string()) != nullptr;
    default: throw EvalError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

int compare(const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int order = a.as_string().compare(b.as_string());  // UTF-8 bytes sort as code points
    return order < 0 ? -1 : (order > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw EvalError("ordering not supported between instances of '" + a.type_name() + "' and '" +
                  b.type_name() + "'");
}

namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw EvalError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                  b.type_name() + "'");
}

int64_t checked(long double exact, const std::string& op) {
  if (exact > static_cast<long double>(std::numeric_limits<int64_t>::max()) ||
      exact < static_cast<long double>(std::numeric_limits<int64_t>::min()))
    throw EvalError("integer overflow in " + op);
  return static_cast<int64_t>(exact);
}

Value repeat(const Value& sequence, int64_t times) {
  if (times > 1000000) throw EvalError("repetition count too large");
  if (sequence.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += sequence.as_string();
    return Value(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < times; ++i)
    out.insert(out.end(), sequence.as_list().begin(), sequence.as_list().end());
  return Value(std::move(out));
}

}  // namespace

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    const bool ints = !a.is_float() && !b.is_float();
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (op == "+") return Value(checked(static_cast<long double>(x) + y, op));
      if (op == "-") return Value(checked(static_cast<long double>(x) - y, op));
      if (op == "*") return Value(checked(static_cast<long double>(x) * y, op));
      if ((op == "//" || op == "%" || op == "/") && y == 0)
        throw EvalError(op == "/" ? "division by zero" : "integer division or modulo by zero");
      if (op == "//") return Value(x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0));
      if (op == "%") {
        int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return Value(r);
      }
      if (op == "**" && y >= 0) return Value(checked(std::pow(static_cast<long double>(x), y), op));
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0) throw EvalError("float division by zero");
    if (op == "/") return Value(x / y);
    if (op == "//") return Value(std::floor(x / y));
    if (op == "%") {
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value(r);
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out));
    }
    if (a.is_string())
      throw EvalError("can only concatenate str (not \"" + b.type_name() + "\") to str");
    if (a.is_list())
      throw EvalError("can only concatenate list (not \"" + b.type_name() + "\") to list");
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) throw EvalError("printf-style '%' string formatting is not supported");
  unsupported(op, a, b);
}

Value slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  require_defined(object);
  const auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool())
      throw EvalError(std::string("slice ") + what + " must be an integer or None, not " + v.type_name());
    return v.as_int();
  };
  const int64_t step_value = bound(step, "step").value_or(1);
  if (step_value == 0) throw EvalError("slice step cannot be zero");
  std::u32string codes;
  int64_t n = 0;
  if (object.is_string()) {
    codes = decode_utf8(object.as_string());
    n = static_cast<int64_t>(codes.size());
  } else if (object.is_list()) {
    n = static_cast<int64_t>(object.as_list().size());
  } else {
    return Value::undefined(std::string("'").append(object.type_name()).append("' object cannot be sliced"));
  }
  // Python's PySlice_AdjustIndices.
  const auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step_value < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step_value < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t begin = adjust(bound(start, "start"), step_value < 0 ? n - 1 : 0);
  const int64_t end = adjust(bound(stop, "stop"), step_value < 0 ? -1 : n);
  std::u32string out_codes;
  List out_items;
  for (int64_t i = begin; step_value > 0 ? i < end : i > end; i += step_value) {
    if (object.is_string()) out_codes += codes[static_cast<size_t>(i)];
    else out_items.push_back(object.as_list()[static_cast<size_t>(i)]);
  }
  if (object.is_string()) return Value(encode_utf8(out_codes));
  return Value(std::move(out_items));
}

}  // namespace tessera::text::jinja
