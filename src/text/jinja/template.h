// Template: a compiled Jinja template (the subset chat templates use).
//
//   jinja::Template t(source, "chat template 'x'");   // throws on a syntax error
//   std::string text = t.render(variables);             // throws on an evaluation error
//
// Both throw Error(kInvalidArgument) whose message names the template, the
// line and column, and the construct that failed. Rendering is const and may
// run on several threads at once.
//
// Supported: {{ }}, {% %}, {# #}, whitespace control (- and +, trim_blocks,
// lstrip_blocks), if/elif/else, for (with else, loop filter `if`, unpacking,
// loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem,
// break/continue), set (also ns.attr and block set with filters), macro,
// filter and with blocks, {% generation %} (transformers), raw; literals of
// strings, numbers, lists, tuples and dicts; the operators of jinja2; the
// filters and tests listed in filters.cc; the str/dict/list methods in
// methods.cc; the globals range, dict and namespace plus those passed in.
// Not supported: template inheritance and includes, call blocks, recursive
// loops, loop.cycle, *args/**kwargs, printf-style `%` on strings, autoescape.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/lexer.h"
#include "text/jinja/value.h"

namespace tessera::text::jinja {

struct Stmt;

class Template {
 public:
  // `name` appears in every error message ("chat template 'llama3'").
  Template(std::string_view source, std::string name, const LexerOptions& options = {});

  std::string render(const Map& variables) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace tessera::text::jinja
