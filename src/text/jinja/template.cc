#include "text/jinja/template.h"

#include "text/jinja/interpreter.h"
#include "text/jinja/parser.h"

namespace tessera::text::jinja {
namespace {

// jinja2 refuses unknown filters and tests when it compiles a template; so do we.
void check_names(const Expr& expr, const std::string& template_name) {
  if (expr.kind == ExprKind::kFilter && !has_filter(expr.name))
    throw_template_error(template_name, expr.line, expr.column, "no filter named '" + expr.name + "'");
  if (expr.kind == ExprKind::kTest && !has_test(expr.name))
    throw_template_error(template_name, expr.line, expr.column, "no test named '" + expr.name + "'");
  for (const auto& child : expr.children)
    if (child) check_names(*child, template_name);
  for (const auto& kwarg : expr.kwargs) check_names(*kwarg.second, template_name);
}

void check_names(const std::vector<StmtPtr>& body, const std::string& template_name) {
  for (const auto& stmt : body) {
    for (const Expr* expr : {stmt->expr.get(), stmt->condition.get(), stmt->filter.get()})
      if (expr) check_names(*expr, template_name);
    for (const auto& param : stmt->params)
      if (param.second) check_names(*param.second, template_name);
    check_names(stmt->body, template_name);
    check_names(stmt->else_body, template_name);
  }
}

}  // namespace

Template::Template(std::string_view source, std::string name, const LexerOptions& options)
    : name_(std::move(name)) {
  auto body = std::make_shared<std::vector<StmtPtr>>(parse(tokenize(source, options, name_), name_));
  check_names(*body, name_);
  body_ = std::move(body);
}

std::string Template::render(const Map& variables) const {
  Interpreter interpreter(name_);
  return interpreter.render(*body_, variables);
}

}  // namespace tessera::text::jinja
