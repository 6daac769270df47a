#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/jinja/unicode.h"

namespace tessera::text::jinja {

size_t Map::size() const { return entries_.size(); }

const Value* Map::find(std::string_view key) const {
  for (const auto& [k, v] : entries_)
    if (k == key) return &v;
  return nullptr;
}

void Map::set(std::string key, Value value) {
  for (auto& [k, v] : entries_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

Value::Value(List list)
    : kind_(ValueKind::kList), data_(std::make_shared<const List>(std::move(list))) {}
Value::Value(Map map) : kind_(ValueKind::kMap), data_(std::make_shared<Map>(std::move(map))) {}
Value::Value(std::shared_ptr<const Callable> callable)
    : kind_(ValueKind::kCallable), data_(std::move(callable)) {}

Value Value::none() {
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}

Value Value::undefined(std::string what) {
  Value v;
  v.data_ = std::move(what);
  return v;
}

Value Value::make_namespace(Map initial) {
  Value v;
  v.kind_ = ValueKind::kNamespace;
  v.data_ = std::make_shared<Map>(std::move(initial));
  return v;
}

Value Value::tuple(List items) {
  Value v(std::move(items));
  v.tuple_ = true;
  return v;
}

std::string Value::undefined_message() const {
  if (const auto* s = std::get_if<std::string>(&data_); s && !s->empty()) return *s;
  return "value is undefined";
}

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

bool Value::truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone: return false;
    case ValueKind::kBool: return as_bool();
    case ValueKind::kInt: return as_int() != 0;
    case ValueKind::kFloat: return as_double() != 0.0;
    case ValueKind::kString: return !as_string().empty();
    case ValueKind::kList: return !as_list().empty();
    case ValueKind::kMap: return as_map().size() != 0;
    case ValueKind::kNamespace:
    case ValueKind::kCallable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case ValueKind::kUndefined: return "Undefined";
    case ValueKind::kNone: return "NoneType";
    case ValueKind::kBool: return "bool";
    case ValueKind::kInt: return "int";
    case ValueKind::kFloat: return "float";
    case ValueKind::kString: return "str";
    case ValueKind::kList: return "list";
    case ValueKind::kMap: return "dict";
    case ValueKind::kNamespace: return "Namespace";
    case ValueKind::kCallable: return "function";
  }
  return "object";
}

Value make_function(std::string name, Function::Body body) {
  return Value(std::shared_ptr<const Callable>(
      std::make_shared<Function>(std::move(name), std::move(body))));
}

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string sci(buffer, result.ptr);  // "-1.2345e+02"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  // Python's repr: exponent notation when the decimal point sits outside [-4, 16).
  if (exponent >= 16 || exponent < -4) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  const int point = exponent + 1;  // digits before the decimal point
  const int count = static_cast<int>(digits.size());
  if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
  if (point < count) return sign + digits.substr(0, point) + "." + digits.substr(point);
  return sign + digits + std::string(point - count, '0') + ".0";
}

namespace {

void append_hex_escape(std::string& out, const char* prefix, unsigned width, uint32_t code) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%s%0*x", prefix, static_cast<int>(width), code);
  out += buffer;
}

std::string string_repr(const std::string& text) {
  const bool has_single = text.find('\'') != std::string::npos;
  const bool has_double = text.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (const char32_t c : decode_utf8(text)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!is_printable(c)) {
      if (c < 0x100) append_hex_escape(out, "\\x", 2, c);
      else if (c < 0x10000) append_hex_escape(out, "\\u", 4, c);
      else append_hex_escape(out, "\\U", 8, c);
    } else {
      append_utf8_char(out, c);
    }
  }
  out += quote;
  return out;
}

std::string container_str(const Value& value) {
  std::string out;
  if (value.is_list()) {
    const List& items = value.as_list();
    out = value.is_tuple() ? "(" : "[";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + to_repr(items[i]);
    if (value.is_tuple()) return out + (items.size() == 1 ? ",)" : ")");
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (const auto& [key, item] : value.as_map().entries()) {
    if (!first) out += ", ";
    first = false;
    out += string_repr(key) + ": " + to_repr(item);
  }
  out += "}";
  return value.is_namespace() ? "<Namespace " + out + ">" : out;
}

}  // namespace

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kUndefined: return "";
    case ValueKind::kNone: return "None";
    case ValueKind::kBool: return value.as_bool() ? "True" : "False";
    case ValueKind::kInt: return std::to_string(value.as_int());
    case ValueKind::kFloat: return float_repr(value.as_double());
    case ValueKind::kString: return value.as_string();
    case ValueKind::kList:
    case ValueKind::kMap:
    case ValueKind::kNamespace: return container_str(value);
    case ValueKind::kCallable: return "<function " + value.as_callable().name() + ">";
  }
  return "";
}

std::string to_repr(const Value& value) {
  if (value.is_string()) return string_repr(value.as_string());
  if (value.is_undefined()) return "Undefined";
  return to_str(value);
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind() || a.is_tuple() != b.is_tuple()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone: return true;
    case ValueKind::kString: return a.as_string() == b.as_string();
    case ValueKind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case ValueKind::kMap: {
      const Map& x = a.as_map();
      const Map& y = b.as_map();
      if (x.size() != y.size()) return false;
      for (const auto& [key, item] : x.entries()) {
        const Value* other = y.find(key);
        if (!other || !equals(item, *other)) return false;
      }
      return true;
    }
    case ValueKind::kNamespace: return &a.as_map() == &b.as_map();
    case ValueKind::kCallable: return &a.as_callable() == &b.as_callable();
    default: return false;
  }
}

Value from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List list;
      list.reserve(json.size());
      for (const auto& item : json) list.push_back(from_json(item));
      return Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      Map map;
      for (const auto& [key, item] : json.items()) map.set(key, from_json(item));
      return Value(std::move(map));
    }
    default: throw EvalError("JSON value of type " + std::string(json.type_name()) +
                             " has no template equivalent");
  }
}

namespace {

void dump_string(std::string& out, const std::string& text, bool ensure_ascii) {
  out += '"';
  for (const char32_t c : decode_utf8(text)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            append_hex_escape(out, "\\u", 4, 0xD800 + (v >> 10));
            append_hex_escape(out, "\\u", 4, 0xDC00 + (v & 0x3FF));
          } else {
            append_hex_escape(out, "\\u", 4, c);
          }
        } else {
          append_utf8_char(out, c);
        }
    }
  }
  out += '"';
}

void dump(std::string& out, const Value& value, const JsonDumpOptions& options, int level) {
  const auto newline = [&](int depth) {
    if (options.indent) out += "\n" + std::string(static_cast<size_t>(*options.indent * depth), ' ');
  };
  switch (value.kind()) {
    case ValueKind::kNone: out += "null"; return;
    case ValueKind::kBool: out += value.as_bool() ? "true" : "false"; return;
    case ValueKind::kInt: out += std::to_string(value.as_int()); return;
    case ValueKind::kFloat: {
      const double d = value.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
      else out += float_repr(d);
      return;
    }
    case ValueKind::kString: dump_string(out, value.as_string(), options.ensure_ascii); return;
    case ValueKind::kList: {
      const List& list = value.as_list();
      if (list.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < list.size(); ++i) {
        if (i) out += options.item_separator;
        newline(level + 1);
        dump(out, list[i], options, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case ValueKind::kMap: {
      auto entries = value.as_map().entries();
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (options.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += options.item_separator;
        newline(level + 1);
        dump_string(out, entries[i].first, options.ensure_ascii);
        out += options.key_separator;
        dump(out, entries[i].second, options, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      throw EvalError("Object of type " + value.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string dump_json(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  dump(out, value, options, 0);
  return out;
}

}  // namespace tessera::text::jinja
