// Parser: tokens to a statement tree, after jinja2's grammar.
//
// Expression precedence, loosest first (as jinja2/parser.py): `x if c else y`,
// or, and, not, comparisons (== != < <= > >= in, not in), + -, ~, * / // %,
// **, unary - +, then postfix .attr [index] [a:b:c] (call) and the
// filter/test chain (| filter, is test) which binds tighter than any binary
// operator: `'a' + x | trim` is `'a' + (x | trim)`.
#pragma once

#include <string>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace tessera::text::jinja {

// Throws Error(kInvalidArgument) naming the template, line, column and construct.
std::vector<StmtPtr> parse(const std::vector<Token>& tokens, const std::string& template_name);

}  // namespace tessera::text::jinja
