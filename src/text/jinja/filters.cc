// jinja2's filters and tests, with the tojson filter as transformers defines
// it for chat templates: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), which, unlike jinja2's own, escapes no HTML.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "text/jinja/interpreter.h"
#include "text/jinja/unicode.h"

namespace tessera::text::jinja {
namespace {

using FilterFn = std::function<Value(Interpreter&, const Value&, const CallArgs&)>;
using TestFn = std::function<bool(Interpreter&, const Value&, const CallArgs&)>;

const Value* opt(const CallArgs& args, size_t index, std::string_view name) {
  const Value* value = args.get(index, name);
  return (value && !value->is_none() && !value->is_undefined()) ? value : nullptr;
}

const Value& need(const CallArgs& args, size_t index, std::string_view name) {
  const Value* value = args.get(index, name);
  if (!value) throw EvalError("missing argument '" + std::string(name) + "'");
  return *value;
}

std::string need_string(const CallArgs& args, size_t index, std::string_view name) {
  const Value& value = need(args, index, name);
  if (!value.is_string()) throw EvalError("argument '" + std::string(name) + "' must be a string");
  return value.as_string();
}

// jinja2's make_attrgetter: "a.b.0" looks up each part with getitem semantics.
Value lookup_attribute(const Value& item, const std::string& attribute) {
  Value current = item;
  size_t pos = 0;
  while (true) {
    const size_t dot = attribute.find('.', pos);
    const std::string part = attribute.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    current = get_item(current, numeric ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return current;
    pos = dot + 1;
  }
}

Value ignore_case(const Value& value) { return value.is_string() ? Value(lower(value.as_string())) : value; }

// jinja2's select/reject/selectattr/rejectattr.
Value select(Interpreter& in, const Value& value, const CallArgs& args, bool by_attribute, bool keep) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) attribute = need_string(args, next++, "attribute");
  std::string test;
  if (next < args.positional.size()) test = to_str(args.positional[next++]);
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, args.positional.size())),
                              args.positional.end());
  List out;
  for (const Value& item : iterate(value)) {
    const Value subject = by_attribute ? lookup_attribute(item, attribute) : item;
    const bool passed = test.empty() ? subject.truthy() : in.apply_test(test, subject, test_args);
    if (passed == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value map_filter(Interpreter& in, const Value& value, const CallArgs& args) {
  List out;
  if (args.positional.empty()) {
    const Value* attribute = args.get(SIZE_MAX, "attribute");
    if (!attribute) throw EvalError("map() needs a filter name or attribute=");
    const Value* fallback = args.get(SIZE_MAX, "default");
    for (const Value& item : iterate(value)) {
      Value v = lookup_attribute(item, to_str(*attribute));
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value(std::move(out));
  }
  const std::string filter = to_str(args.positional[0]);
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : iterate(value)) out.push_back(in.apply_filter(filter, item, rest));
  return Value(std::move(out));
}

Value tojson(const Value& value, const CallArgs& args) {
  JsonDumpOptions options;
  if (const Value* ascii = opt(args, 0, "ensure_ascii")) options.ensure_ascii = ascii->truthy();
  if (const Value* indent = opt(args, 1, "indent")) {
    if (!indent->is_int()) throw EvalError("indent must be an integer");
    options.indent = static_cast<int>(std::max<int64_t>(0, indent->as_int()));
    options.item_separator = ",";
  }
  if (const Value* separators = opt(args, 2, "separators")) {
    if (!separators->is_list() || separators->as_list().size() != 2)
      throw EvalError("separators must be a pair of strings");
    options.item_separator = to_str(separators->as_list()[0]);
    options.key_separator = to_str(separators->as_list()[1]);
  }
  if (const Value* sort = opt(args, 3, "sort_keys")) options.sort_keys = sort->truthy();
  return Value(dump_json(value, options));
}

Value indent(const Value& value, const CallArgs& args) {
  require_defined(value);
  std::string prefix = "    ";
  if (const Value* width = opt(args, 0, "width"))
    prefix = width->is_string() ? width->as_string() : std::string(static_cast<size_t>(std::max<int64_t>(0, width->as_int())), ' ');
  const Value* first = opt(args, 1, "first");
  const Value* blank = opt(args, 2, "blank");
  const std::string text = to_str(value) + "\n";
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i)
    out += "\n" + ((lines[i].empty() && !(blank && blank->truthy())) ? "" : prefix) + lines[i];
  if (first && first->truthy()) out = prefix + out;
  return Value(out);
}

Value to_int(const Value& value, const CallArgs& args) {
  require_defined(value);
  const Value* fallback = args.get(0, "default");
  const Value result_default = fallback ? *fallback : Value(0);
  if (value.is_int() || value.is_bool()) return Value(value.as_int());
  if (value.is_float()) return std::isfinite(value.as_double()) ? Value(static_cast<int64_t>(value.as_double())) : result_default;
  if (value.is_string()) {
    const std::string text = strip(value.as_string(), true, true);
    try {
      size_t used = 0;
      const long long n = std::stoll(text, &used, 10);
      if (used == text.size()) return Value(static_cast<int64_t>(n));
      const double d = std::stod(text, &used);
      if (used == text.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return result_default;
}

Value to_float(const Value& value, const CallArgs& args) {
  require_defined(value);
  const Value* fallback = args.get(0, "default");
  if (value.is_number()) return Value(value.as_double());
  if (value.is_string()) {
    try {
      size_t used = 0;
      const std::string text = strip(value.as_string(), true, true);
      const double d = std::stod(text, &used);
      if (used == text.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return fallback ? *fallback : Value(0.0);
}

Value unique(const Value& value, const CallArgs& args) {
  const Value* case_sensitive = opt(args, 0, "case_sensitive");
  const Value* attribute = opt(args, 1, "attribute");
  List out, seen;
  for (const Value& item : iterate(value)) {
    Value key = attribute ? lookup_attribute(item, to_str(*attribute)) : item;
    if (!(case_sensitive && case_sensitive->truthy())) key = ignore_case(key);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value(std::move(out));
}

Value sort(const Value& value, const CallArgs& args) {
  const Value* reverse = opt(args, 0, "reverse");
  const Value* case_sensitive = opt(args, 1, "case_sensitive");
  const Value* attribute = opt(args, 2, "attribute");
  List items = iterate(value);
  const auto key = [&](const Value& item) {
    Value k = attribute ? lookup_attribute(item, to_str(*attribute)) : item;
    return (case_sensitive && case_sensitive->truthy()) ? k : ignore_case(k);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse && reverse->truthy() ? compare(key(b), key(a)) < 0 : compare(key(a), key(b)) < 0;
  });
  return Value(std::move(items));
}

// jinja2's title filter: each word (split at spaces, brackets and hyphens) capitalised.
std::string title_filter(const std::string& text) {
  std::u32string codes = decode_utf8(text);
  bool word_start = true;
  for (auto& c : codes) {
    const bool separator = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      word_start = true;
      continue;
    }
    c = word_start ? to_upper(c) : to_lower(c);
    word_start = false;
  }
  return encode_utf8(codes);
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = [] {
    std::map<std::string, FilterFn> f;
    const auto str_filter = [](std::function<std::string(const std::string&)> fn) {
      return [fn](Interpreter&, const Value& v, const CallArgs&) { return Value(fn(to_str(v))); };
    };
    f["abs"] = [](Interpreter&, const Value& v, const CallArgs&) {
      require_defined(v);
      if (v.is_float()) return Value(std::fabs(v.as_double()));
      if (v.is_number()) return Value(std::abs(v.as_int()));
      throw EvalError("bad operand type for abs(): '" + v.type_name() + "'");
    };
    f["attr"] = [](Interpreter&, const Value& v, const CallArgs& a) {  // Python's getattr only, no item
      const std::string name = need_string(a, 0, "name");
      if (v.is_namespace())
        if (const Value* value = v.as_map().find(name)) return *value;
      Value method = find_method(v, name);
      return method.is_undefined() ? Value::undefined("no attribute '" + name + "'") : method;
    };
    f["capitalize"] = str_filter([](const std::string& s) {
      std::u32string codes = decode_utf8(lower(s));
      if (!codes.empty()) codes[0] = to_upper(codes[0]);
      return encode_utf8(codes);
    });
    f["lower"] = str_filter([](const std::string& s) { return lower(s); });
    f["upper"] = str_filter([](const std::string& s) { return upper(s); });
    f["title"] = str_filter(title_filter);
    f["string"] = str_filter([](const std::string& s) { return s; });
    f["safe"] = [](Interpreter&, const Value& v, const CallArgs&) { return v; };
    f["escape"] = str_filter([](const std::string& s) {
      std::string out;
      for (const char c : s) {
        switch (c) {
          case '&': out += "&amp;"; break;
          case '<': out += "&lt;"; break;
          case '>': out += "&gt;"; break;
          case '"': out += "&#34;"; break;
          case '\'': out += "&#39;"; break;
          default: out += c;
        }
      }
      return out;
    });
    f["e"] = f["escape"];
    f["length"] = [](Interpreter&, const Value& v, const CallArgs&) { return Value(length(v)); };
    f["count"] = f["length"];
    f["default"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value* boolean = opt(a, 1, "boolean");
      const bool use_default = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
      if (!use_default) return v;
      const Value* fallback = a.get(0, "default_value");
      return fallback ? *fallback : Value("");
    };
    f["d"] = f["default"];
    f["first"] = [](Interpreter&, const Value& v, const CallArgs&) {
      const List items = iterate(v);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    f["last"] = [](Interpreter&, const Value& v, const CallArgs&) {
      const List items = iterate(v);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    f["list"] = [](Interpreter&, const Value& v, const CallArgs&) { return Value(iterate(v)); };
    f["reverse"] = [](Interpreter&, const Value& v, const CallArgs&) {
      require_defined(v);
      if (v.is_string()) {
        std::u32string codes = decode_utf8(v.as_string());
        std::reverse(codes.begin(), codes.end());
        return Value(encode_utf8(codes));
      }
      List items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value(std::move(items));
    };
    f["int"] = [](Interpreter&, const Value& v, const CallArgs& a) { return to_int(v, a); };
    f["float"] = [](Interpreter&, const Value& v, const CallArgs& a) { return to_float(v, a); };
    f["round"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      require_defined(v);
      const Value* precision = opt(a, 0, "precision");
      const Value* method = opt(a, 1, "method");
      const double scale = std::pow(10.0, precision ? static_cast<double>(precision->as_int()) : 0.0);
      const std::string how = method ? to_str(*method) : "common";
      double x = v.as_double() * scale;
      // Python's round() ties to even (2.5 -> 2.0), as nearbyint does by default.
      x = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::nearbyint(x);
      return Value(x / scale);
    };
    f["items"] = [](Interpreter&, const Value& v, const CallArgs&) {
      if (v.is_undefined()) return Value(List{});
      if (!v.is_map()) throw EvalError("Can only get item pairs from a mapping.");
      List out;
      for (const auto& [key, value] : v.as_map().entries()) out.push_back(Value::tuple({Value(key), value}));
      return Value(std::move(out));
    };
    f["join"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value* separator = opt(a, 0, "d");
      const Value* attribute = opt(a, 1, "attribute");
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v)) {
        if (!first && separator) out += to_str(*separator);
        first = false;
        out += to_str(attribute ? lookup_attribute(item, to_str(*attribute)) : item);
      }
      return Value(out);
    };
    f["replace"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return find_method(Value(to_str(v)), "replace").as_callable().call(a);
    };
    f["trim"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value* chars = opt(a, 0, "chars");
      const std::u32string set = chars ? decode_utf8(to_str(*chars)) : std::u32string();
      return Value(strip(to_str(v), true, true, chars ? &set : nullptr));
    };
    f["tojson"] = [](Interpreter&, const Value& v, const CallArgs& a) { return tojson(v, a); };
    f["indent"] = [](Interpreter&, const Value& v, const CallArgs& a) { return indent(v, a); };
    f["map"] = map_filter;
    f["select"] = [](Interpreter& in, const Value& v, const CallArgs& a) { return select(in, v, a, false, true); };
    f["reject"] = [](Interpreter& in, const Value& v, const CallArgs& a) { return select(in, v, a, false, false); };
    f["selectattr"] = [](Interpreter& in, const Value& v, const CallArgs& a) { return select(in, v, a, true, true); };
    f["rejectattr"] = [](Interpreter& in, const Value& v, const CallArgs& a) { return select(in, v, a, true, false); };
    f["unique"] = [](Interpreter&, const Value& v, const CallArgs& a) { return unique(v, a); };
    f["sort"] = [](Interpreter&, const Value& v, const CallArgs& a) { return sort(v, a); };
    f["sum"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value* attribute = opt(a, 0, "attribute");
      const Value* start = opt(a, 1, "start");
      Value total = start ? *start : Value(0);
      for (const Value& item : iterate(v))
        total = arithmetic("+", total, attribute ? lookup_attribute(item, to_str(*attribute)) : item);
      return total;
    };
    const auto extreme = [](bool want_max) {
      return [want_max](Interpreter&, const Value& v, const CallArgs& a) {
        const Value* attribute = opt(a, 1, "attribute");
        const List items = iterate(v);
        if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        Value best = items[0];
        const auto key = [&](const Value& item) {
          return ignore_case(attribute ? lookup_attribute(item, to_str(*attribute)) : item);
        };
        for (const Value& item : items)
          if (want_max ? compare(key(item), key(best)) > 0 : compare(key(item), key(best)) < 0) best = item;
        return best;
      };
    };
    f["max"] = extreme(true);
    f["min"] = extreme(false);
    return f;
  }();
  return table;
}

bool is_int_kind(const Value& v) { return v.is_int(); }

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = [] {
    std::map<std::string, TestFn> t;
    const auto kind = [](std::function<bool(const Value&)> fn) {
      return [fn](Interpreter&, const Value& v, const CallArgs&) { return fn(v); };
    };
    t["defined"] = kind([](const Value& v) { return !v.is_undefined(); });
    t["undefined"] = kind([](const Value& v) { return v.is_undefined(); });
    t["none"] = kind([](const Value& v) { return v.is_none(); });
    t["boolean"] = kind([](const Value& v) { return v.is_bool(); });
    t["true"] = kind([](const Value& v) { return v.is_bool() && v.as_bool(); });
    t["false"] = kind([](const Value& v) { return v.is_bool() && !v.as_bool(); });
    t["integer"] = kind(is_int_kind);
    t["float"] = kind([](const Value& v) { return v.is_float(); });
    t["number"] = kind([](const Value& v) { return v.is_number(); });
    t["string"] = kind([](const Value& v) { return v.is_string(); });
    t["mapping"] = kind([](const Value& v) { return v.is_map(); });
    t["callable"] = kind([](const Value& v) { return v.is_callable(); });
    t["iterable"] = kind([](const Value& v) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_map();
    });
    t["sequence"] = t["iterable"];
    t["escaped"] = kind([](const Value&) { return false; });
    t["lower"] = kind([](const Value& v) {
      const std::string s = to_str(v);
      return s == lower(s) && s != upper(s);
    });
    t["upper"] = kind([](const Value& v) {
      const std::string s = to_str(v);
      return s == upper(s) && s != lower(s);
    });
    t["odd"] = kind([](const Value& v) { return arithmetic("%", v, Value(2)).as_int() == 1; });
    t["even"] = kind([](const Value& v) { return arithmetic("%", v, Value(2)).as_int() == 0; });
    t["divisibleby"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      return !arithmetic("%", v, need(a, 0, "num")).truthy();
    };
    t["eq"] = [](Interpreter&, const Value& v, const CallArgs& a) { return equals(v, need(a, 0, "other")); };
    t["ne"] = [](Interpreter&, const Value& v, const CallArgs& a) { return !equals(v, need(a, 0, "other")); };
    t["lt"] = [](Interpreter&, const Value& v, const CallArgs& a) { return compare(v, need(a, 0, "other")) < 0; };
    t["le"] = [](Interpreter&, const Value& v, const CallArgs& a) { return compare(v, need(a, 0, "other")) <= 0; };
    t["gt"] = [](Interpreter&, const Value& v, const CallArgs& a) { return compare(v, need(a, 0, "other")) > 0; };
    t["ge"] = [](Interpreter&, const Value& v, const CallArgs& a) { return compare(v, need(a, 0, "other")) >= 0; };
    t["in"] = [](Interpreter&, const Value& v, const CallArgs& a) { return contains(need(a, 0, "seq"), v); };
    t["sameas"] = [](Interpreter&, const Value& v, const CallArgs& a) {
      const Value& other = need(a, 0, "other");
      return v.kind() == other.kind() && (v.is_none() || v.is_undefined() || (v.is_bool() && equals(v, other)));
    };
    t["filter"] = [](Interpreter&, const Value& v, const CallArgs&) { return v.is_string() && filters().count(v.as_string()); };
    t["equalto"] = t["eq"];
    t["=="] = t["eq"];
    t["!="] = t["ne"];
    t["lessthan"] = t["lt"];
    t["<"] = t["lt"];
    t["<="] = t["le"];
    t["greaterthan"] = t["gt"];
    t[">"] = t["gt"];
    t[">="] = t["ge"];
    return t;
  }();
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) != 0; }
bool has_test(const std::string& name) { return tests().count(name) != 0; }

Value Interpreter::apply_filter(const std::string& name, const Value& operand, const CallArgs& args) {
  const auto& table = filters();
  const auto it = table.find(name);
  if (it == table.end()) throw EvalError("no filter named '" + name + "'");
  return it->second(*this, operand, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& operand, const CallArgs& args) {
  const auto& table = tests();
  const auto it = table.find(name);
  if (it == table.end()) throw EvalError("no test named '" + name + "'");
  return it->second(*this, operand, args);
}

}  // namespace tessera::text::jinja
