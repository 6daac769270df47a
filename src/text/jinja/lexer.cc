#include "text/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "text/jinja/unicode.h"

namespace tessera::text::jinja {

void throw_template_error(const std::string& template_name, int line, int column,
                          const std::string& message) {
  std::string where = template_name + ": line " + std::to_string(line);
  if (column > 0) where += ", column " + std::to_string(column);
  throw Error(ErrorKind::kInvalidArgument, where + ": " + message,
              "fix the chat template, or choose another with --chat-template");
}

namespace {

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options, const std::string& name)
      : src_(std::move(source)), options_(options), name_(name) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t open = pos;
      while (true) {
        open = src_.find('{', open);
        if (open == std::string::npos || open + 1 >= src_.size()) break;
        const char next = src_[open + 1];
        if (next == '{' || next == '%' || next == '#') break;
        ++open;
      }
      if (open == std::string::npos || open + 1 >= src_.size()) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      const char kind = src_[open + 1];
      size_t after = open + 2;
      const char sign = (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) ? src_[after] : 0;
      if (sign) ++after;
      std::string text = src_.substr(pos, open - pos);
      if (sign == '-') {
        text = rstrip(text);
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        const size_t line_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_pos > 0 || line_starting) && line_pos < text.size() &&
            std::all_of(text.begin() + line_pos, text.end(), is_blank))
          text.resize(line_pos);
      }
      emit_data(pos, text);
      if (kind == '#') {
        pos = skip_comment(open, after);
      } else if (kind == '%' && is_raw(after)) {
        pos = lex_raw(open);
      } else {
        pos = lex_tag(open, after, kind);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(make(TokenKind::kEnd, "", src_.size()));
    return std::move(tokens_);
  }

 private:
  static std::string rstrip(const std::string& text) { return strip(text, false, true); }

  Token make(TokenKind kind, std::string text, size_t offset) const {
    Token token;
    token.kind = kind;
    token.text = std::move(text);
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    token.line = static_cast<int>(it - line_starts_.begin()) + 1;
    token.column = static_cast<int>(offset - *it) + 1;
    return token;
  }

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    const Token at = make(TokenKind::kEnd, "", offset);
    throw_template_error(name_, at.line, at.column, message);
  }

  void emit_data(size_t offset, std::string text) {
    if (!text.empty()) tokens_.push_back(make(TokenKind::kData, std::move(text), offset));
  }

  // After an end tag: "-" strips all following whitespace; trim_blocks one newline.
  size_t after_end(size_t end, char sign, bool block_like) const {
    if (sign == '-') {
      while (end < src_.size() && is_blank(src_[end])) ++end;
    } else if (sign != '+' && block_like && options_.trim_blocks && end < src_.size() &&
               src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  size_t skip_comment(size_t open, size_t body) {
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) fail(open, "missing end of comment tag '#}'");
    char sign = 0;
    if (close > body && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
    return after_end(close + 2, sign, true);
  }

  // {% raw %} ... {% endraw %}: the text between is data, untouched.
  bool is_raw(size_t pos) const {
    while (pos < src_.size() && is_blank(src_[pos])) ++pos;
    return src_.compare(pos, 3, "raw") == 0 && (pos + 3 >= src_.size() || !is_name_char(src_[pos + 3]));
  }

  size_t lex_raw(size_t open) {
    size_t close = src_.find("%}", open);
    if (close == std::string::npos) fail(open, "missing end of raw tag '%}'");
    char sign = src_[close - 1] == '-' ? '-' : 0;
    const size_t body = after_end(close + 2, sign, true);
    size_t search = body;
    while (true) {
      const size_t tag = src_.find("{%", search);
      if (tag == std::string::npos) fail(open, "missing {% endraw %} for this {% raw %}");
      size_t p = tag + 2;
      const char open_sign = (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ? src_[p] : 0;
      if (open_sign) ++p;
      while (p < src_.size() && is_blank(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") == 0) {
        p += 6;
        while (p < src_.size() && is_blank(src_[p])) ++p;
        const char end_sign = (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ? src_[p] : 0;
        if (end_sign) ++p;
        if (src_.compare(p, 2, "%}") == 0) {
          std::string text = src_.substr(body, tag - body);
          if (open_sign == '-') text = rstrip(text);
          emit_data(body, text);
          return after_end(p + 2, end_sign, true);
        }
      }
      search = tag + 2;
    }
  }

  size_t lex_tag(size_t open, size_t pos, char kind) {
    const bool block = kind == '%';
    tokens_.push_back(make(block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin,
                           block ? "{%" : "{{", open));
    const char close_char = block ? '%' : '}';
    std::vector<char> balance;
    while (true) {
      if (pos >= src_.size())
        fail(open, block ? "unexpected end of template: missing '%}' for this '{%'"
                         : "unexpected end of template: missing '}}' for this '{{'");
      if (balance.empty()) {
        const bool minus = src_[pos] == '-' && src_.compare(pos + 1, 1, std::string(1, close_char)) == 0 &&
                           src_.compare(pos + 2, 1, "}") == 0;
        const bool plus = block && src_[pos] == '+' && src_.compare(pos + 1, 2, "%}") == 0;
        const bool plain = src_[pos] == close_char && pos + 1 < src_.size() && src_[pos + 1] == '}';
        if (minus || plus || plain) {
          const size_t end = pos + (plain ? 2 : 3);
          tokens_.push_back(make(block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd,
                                 block ? "%}" : "}}", pos));
          return after_end(end, minus ? '-' : (plus ? '+' : 0), block);
        }
      }
      const char c = src_[pos];
      if (is_blank(c)) {
        ++pos;
      } else if (is_name_start(c)) {
        size_t end = pos;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        tokens_.push_back(make(TokenKind::kName, src_.substr(pos, end - pos), pos));
        pos = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos);
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, balance);
      }
    }
  }

  size_t lex_number(size_t pos) {
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator &&
                           tokens_.back().text == ".";
    const auto digits = [&](size_t p) {
      while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) ||
                                 (src_[p] == '_' && p + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p + 1])))))
        ++p;
      return p;
    };
    size_t end = digits(pos);
    bool is_float = false;
    if (!after_dot && end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      end = digits(end + 1);
      is_float = true;
    }
    if (!after_dot && end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t p = end + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        end = digits(p);
        is_float = true;
      }
    }
    std::string text = src_.substr(pos, end - pos);
    std::string clean;
    for (const char ch : text)
      if (ch != '_') clean += ch;
    Token token = make(is_float ? TokenKind::kFloat : TokenKind::kInteger, text, pos);
    try {
      if (is_float) token.float_value = std::stod(clean);
      else token.int_value = std::stoll(clean);
    } catch (const std::exception&) {
      fail(pos, "number '" + text + "' is out of range");
    }
    tokens_.push_back(std::move(token));
    return end;
  }

  // Python's unicode-escape decoding of a string literal's body.
  size_t lex_string(size_t pos) {
    const char quote = src_[pos];
    std::string value;
    size_t p = pos + 1;
    while (true) {
      if (p >= src_.size()) fail(pos, "unterminated string literal");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\' || p + 1 >= src_.size()) {
        value += c;
        ++p;
        continue;
      }
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n': break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'n': value += '\n'; break;
        case 'r': value += '\r'; break;
        case 't': value += '\t'; break;
        case 'v': value += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t width = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          if (p + width > src_.size() ||
              !std::all_of(src_.begin() + p, src_.begin() + p + width,
                           [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); }))
            fail(p - 2, std::string("truncated \\") + e + " escape in string literal");
          append_utf8_char(value, static_cast<char32_t>(std::stoul(src_.substr(p, width), nullptr, 16)));
          p += width;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            size_t q = p - 1, count = 0;
            char32_t code = 0;
            while (q < src_.size() && count < 3 && src_[q] >= '0' && src_[q] <= '7') {
              code = code * 8 + (src_[q] - '0');
              ++q;
              ++count;
            }
            append_utf8_char(value, code);
            p = q;
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    tokens_.push_back(make(TokenKind::kString, std::move(value), pos));
    return p + 1;
  }

  size_t lex_operator(size_t pos, std::vector<char>& balance) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwo) {
      if (src_.compare(pos, 2, op) == 0) {
        tokens_.push_back(make(TokenKind::kOperator, op, pos));
        return pos + 2;
      }
    }
    const char c = src_[pos];
    if (std::string_view("+-/*%~[](){}=.:|,;<>").find(c) == std::string_view::npos)
      fail(pos, std::string("unexpected character '") + c + "'");
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty() || balance.back() != c) fail(pos, std::string("unexpected '") + c + "'");
      balance.pop_back();
    }
    tokens_.push_back(make(TokenKind::kOperator, std::string(1, c), pos));
    return pos + 1;
  }

  std::string src_;
  LexerOptions options_;
  const std::string& name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options,
                            const std::string& template_name) {
  return Lexer(normalize_newlines(source), options, template_name).run();
}

}  // namespace tessera::text::jinja
