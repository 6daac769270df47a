// Python methods of str, dict and list that templates call (s.strip(),
// d.get(k), d.items(), ...), and jinja2's globals range, dict and namespace.
//
// As in jinja2's ImmutableSandboxedEnvironment, the mutating methods of dict
// and list exist but fail when called.
#include <set>

#include "text/jinja/interpreter.h"
#include "text/jinja/unicode.h"

namespace tessera::text::jinja {
namespace {

const Value& arg(const CallArgs& args, size_t index, std::string_view name, const std::string& method) {
  const Value* value = args.get(index, name);
  if (!value) throw EvalError(method + "() missing required argument '" + std::string(name) + "'");
  return *value;
}

const Value* optional_arg(const CallArgs& args, size_t index, std::string_view name) {
  const Value* value = args.get(index, name);
  return (value && !value->is_none() && !value->is_undefined()) ? value : nullptr;
}

std::string string_arg(const Value& value, const std::string& method) {
  if (!value.is_string())
    throw EvalError(method + "() argument must be str, not " + value.type_name());
  return value.as_string();
}

bool is_cased(char32_t c) { return to_upper(c) != c || to_lower(c) != c; }

std::string title(const std::string& text) {
  std::u32string codes = decode_utf8(text);
  bool previous_cased = false;
  for (auto& c : codes) {
    if (is_cased(c)) {
      c = previous_cased ? to_lower(c) : to_upper(c);
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return encode_utf8(codes);
}

List split(const std::string& text, const Value* separator, int64_t max_split) {
  List parts;
  if (!separator) {  // runs of whitespace, no empty parts
    const std::u32string codes = decode_utf8(text);
    size_t i = 0;
    while (i < codes.size()) {
      while (i < codes.size() && is_space(codes[i])) ++i;
      if (i >= codes.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        parts.emplace_back(encode_utf8(codes.substr(i)));  // the rest, trailing spaces kept
        break;
      }
      size_t j = i;
      while (j < codes.size() && !is_space(codes[j])) ++j;
      parts.emplace_back(encode_utf8(codes.substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  const std::string sep = string_arg(*separator, "split");
  if (sep.empty()) throw EvalError("empty separator");
  size_t pos = 0;
  while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
    const size_t hit = text.find(sep, pos);
    if (hit == std::string::npos) break;
    parts.emplace_back(text.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  parts.emplace_back(text.substr(pos));
  return parts;
}

// str.format with {} / {0} / {name} fields and !s / !r conversions.
std::string format(const std::string& text, const CallArgs& args) {
  std::string out;
  size_t next_auto = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '}') {
      if (i + 1 < text.size() && text[i + 1] == '}') ++i;
      else throw EvalError("single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = text.find('}', i);
    if (close == std::string::npos) throw EvalError("single '{' encountered in format string");
    std::string field = text.substr(i + 1, close - i - 1);
    i = close;
    bool repr = false;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      repr = field.substr(bang + 1) == "r";
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos) throw EvalError("format specs in str.format are not supported");
    const Value* value = nullptr;
    if (field.empty()) {
      value = args.get(next_auto++, "");
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      value = args.get(std::stoul(field), "");
    } else {
      value = args.get(SIZE_MAX, field);
    }
    if (!value) throw EvalError("format field '{" + field + "}' has no argument");
    out += repr ? to_repr(*value) : to_str(*value);
  }
  return out;
}

Value string_method(const std::string& self, const std::string& name, const CallArgs& args) {
  const std::string method = "str." + name;
  if (name == "upper") return Value(upper(self));
  if (name == "lower") return Value(lower(self));
  if (name == "title") return Value(title(self));
  if (name == "capitalize") {
    std::u32string codes = decode_utf8(lower(self));
    if (!codes.empty()) codes[0] = to_upper(codes[0]);
    return Value(encode_utf8(codes));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = optional_arg(args, 0, "chars");
    const std::u32string set = chars ? decode_utf8(string_arg(*chars, method)) : std::u32string();
    return Value(strip(self, name != "rstrip", name != "lstrip", chars ? &set : nullptr));
  }
  if (name == "startswith" || name == "endswith") {
    const Value& affix = arg(args, 0, "prefix", method);
    const List options = affix.is_list() ? affix.as_list() : List{affix};
    for (const Value& option : options) {
      const std::string s = string_arg(option, method);
      if (s.size() > self.size()) continue;
      if (name == "startswith" ? self.compare(0, s.size(), s) == 0
                               : self.compare(self.size() - s.size(), s.size(), s) == 0)
        return Value(true);
    }
    return Value(false);
  }
  if (name == "split") {
    const Value* max_split = optional_arg(args, 1, "maxsplit");
    return Value(split(self, optional_arg(args, 0, "sep"), max_split ? max_split->as_int() : -1));
  }
  if (name == "splitlines") {
    List lines;
    size_t pos = 0;
    while (pos < self.size()) {
      const size_t nl = self.find('\n', pos);
      if (nl == std::string::npos) {
        lines.emplace_back(self.substr(pos));
        break;
      }
      lines.emplace_back(self.substr(pos, nl - pos));
      pos = nl + 1;
    }
    return Value(std::move(lines));
  }
  if (name == "replace") {
    const std::string from = string_arg(arg(args, 0, "old", method), method);
    const std::string to = string_arg(arg(args, 1, "new", method), method);
    const Value* count = optional_arg(args, 2, "count");
    int64_t left = count ? count->as_int() : -1;
    std::string out;
    size_t pos = 0;
    if (from.empty()) return Value(self);  // Python inserts between characters; templates never do
    while (left != 0) {
      const size_t hit = self.find(from, pos);
      if (hit == std::string::npos) break;
      out += self.substr(pos, hit - pos) + to;
      pos = hit + from.size();
      --left;
    }
    return Value(out + self.substr(pos));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    const std::string needle = string_arg(arg(args, 0, "sub", method), method);
    if (name == "count") {
      if (needle.empty()) return Value(static_cast<int64_t>(decode_utf8(self).size() + 1));
      int64_t n = 0;
      for (size_t pos = self.find(needle); pos != std::string::npos; pos = self.find(needle, pos + needle.size())) ++n;
      return Value(n);
    }
    const size_t hit = name == "find" ? self.find(needle) : self.rfind(needle);
    if (hit == std::string::npos) return Value(-1);
    return Value(static_cast<int64_t>(decode_utf8(self.substr(0, hit)).size()));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& item : iterate(arg(args, 0, "iterable", method))) {
      if (!first) out += self;
      first = false;
      out += string_arg(item, method);
    }
    return Value(out);
  }
  if (name == "format") return Value(format(self, args));
  const std::u32string codes = decode_utf8(self);
  const auto all = [&](auto predicate) {
    if (codes.empty()) return Value(false);
    for (const char32_t c : codes)
      if (!predicate(c)) return Value(false);
    return Value(true);
  };
  if (name == "isdigit") return all([](char32_t c) { return c >= '0' && c <= '9'; });
  if (name == "isspace") return all(is_space);
  if (name == "isalpha") return all(is_cased);
  if (name == "isalnum") return all([](char32_t c) { return is_cased(c) || (c >= '0' && c <= '9'); });
  if (name == "islower") return Value(self == lower(self) && self != upper(self));
  if (name == "isupper") return Value(self == upper(self) && self != lower(self));
  throw EvalError("unknown method " + method);
}

Value map_method(const Value& self, const std::string& name, const CallArgs& args) {
  const std::string method = "dict." + name;
  if (name == "get") {
    const Value& key = arg(args, 0, "key", method);
    if (key.is_string())
      if (const Value* value = self.as_map().find(key.as_string())) return *value;
    const Value* fallback = args.get(1, "default");
    return fallback ? *fallback : Value::none();
  }
  if (name == "items" || name == "keys" || name == "values") {
    List out;
    for (const auto& [key, value] : self.as_map().entries()) {
      if (name == "items") out.push_back(Value::tuple({Value(key), value}));
      else if (name == "keys") out.emplace_back(key);
      else out.push_back(value);
    }
    return Value(std::move(out));
  }
  if (name == "copy") return Value(self.as_map());
  throw EvalError("access to " + method + "() is unsafe: templates cannot change a dict");
}

Value list_method(const Value& self, const std::string& name, const CallArgs& args) {
  const std::string method = "list." + name;
  if (name == "count" || name == "index") {
    const Value& needle = arg(args, 0, "value", method);
    int64_t count = 0;
    const List& items = self.as_list();
    for (size_t i = 0; i < items.size(); ++i) {
      if (!equals(items[i], needle)) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++count;
    }
    if (name == "index") throw EvalError(to_repr(needle) + " is not in list");
    return Value(count);
  }
  if (name == "copy") return Value(self.as_list());
  throw EvalError("access to " + method + "() is unsafe: templates cannot change a list");
}

}  // namespace

Value find_method(const Value& object, const std::string& name) {
  static const std::set<std::string> kString = {
      "upper", "lower", "title", "capitalize", "strip", "lstrip", "rstrip", "startswith",
      "endswith", "split", "splitlines", "replace", "find", "rfind", "count", "join", "format",
      "isdigit", "isspace", "isalpha", "isalnum", "islower", "isupper"};
  static const std::set<std::string> kMap = {"get", "items", "keys", "values", "copy", "pop",
                                             "popitem", "setdefault", "update", "clear"};
  static const std::set<std::string> kList = {"count", "index", "copy", "append", "extend", "insert",
                                              "pop", "remove", "reverse", "sort", "clear"};
  const std::set<std::string>* names = object.is_string() ? &kString
                                       : object.is_map()  ? &kMap
                                       : object.is_list() ? &kList
                                                          : nullptr;
  if (!names || !names->count(name)) return {};
  return make_function(object.type_name() + "." + name, [object, name](const CallArgs& args) {
    if (object.is_string()) return string_method(object.as_string(), name, args);
    if (object.is_map()) return map_method(object, name, args);
    return list_method(object, name, args);
  });
}

void add_builtin_globals(Map& globals) {
  globals.set("range", make_function("range", [](const CallArgs& args) {
    int64_t start = 0, stop = 0, step = 1;
    for (const Value& v : args.positional)
      if (!v.is_int() && !v.is_bool()) throw EvalError("range() arguments must be integers");
    const auto& p = args.positional;
    if (p.size() == 1) stop = p[0].as_int();
    else if (p.size() == 2 || p.size() == 3) {
      start = p[0].as_int();
      stop = p[1].as_int();
      if (p.size() == 3) step = p[2].as_int();
    } else {
      throw EvalError("range() takes 1 to 3 arguments");
    }
    if (step == 0) throw EvalError("range() arg 3 must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) throw EvalError("range() too large for a template (over 100000 items)");
      out.emplace_back(i);
    }
    return Value(std::move(out));
  }));
  const auto from_args = [](const CallArgs& args, const char* what) {
    Map map;
    if (!args.positional.empty()) {
      if (args.positional.size() > 1 || !args.positional[0].is_map())
        throw EvalError(std::string(what) + "() takes one mapping and keyword arguments");
      map = args.positional[0].as_map();
    }
    for (const auto& [key, value] : args.keyword) map.set(key, value);
    return map;
  };
  globals.set("dict", make_function("dict", [from_args](const CallArgs& args) {
    return Value(from_args(args, "dict"));
  }));
  globals.set("namespace", make_function("namespace", [from_args](const CallArgs& args) {
    return Value::make_namespace(from_args(args, "namespace"));
  }));
}

}  // namespace tessera::text::jinja
