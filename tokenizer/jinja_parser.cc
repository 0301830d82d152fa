// Parsing the chat-template subset of Jinja. Whitespace is handled as Hugging
// Face renders chat templates (transformers' Jinja environment and
// @huggingface/jinja): trim_blocks and lstrip_blocks on, one trailing newline
// dropped, `-` trimming.
#include <cctype>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/jinja_ast.h"

namespace lrkv::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// trim_blocks, lstrip_blocks, comments and `-` trimming, applied to the text
// first.
std::string Preprocess(std::string t) {
  if (!t.empty() && t.back() == '\n') t.pop_back();
  std::string out;
  out.reserve(t.size());
  size_t i = 0;
  while (i < t.size()) {
    // lstrip_blocks: spaces and tabs from a line's start up to a block or
    // comment tag.
    if (i == 0 || t[i - 1] == '\n') {
      size_t j = i;
      while (j < t.size() && (t[j] == ' ' || t[j] == '\t')) ++j;
      if (j + 1 < t.size() && t[j] == '{' &&
          (t[j + 1] == '%' || t[j + 1] == '#'))
        i = j;
    }
    if (t.compare(i, 2, "{#") ==
        0) {  // a comment goes, with trim_blocks' newline
      const size_t end = t.find("#}", i + 2);
      i = end == std::string::npos ? t.size() : end + 2;
      if (i < t.size() && t[i] == '\n') ++i;
      continue;
    }
    if (t.compare(i, 2, "%}") ==
        0) {  // trim_blocks: the newline after a block tag
      out += "%}";
      i += 2;
      if (i < t.size() && t[i] == '\n') ++i;
      continue;
    }
    out += t[i++];
  }
  // `{%-` / `{{-` eat the whitespace before them, `-%}` / `-}}` the whitespace
  // after.
  std::string trimmed;
  trimmed.reserve(out.size());
  for (size_t k = 0; k < out.size();) {
    if ((out.compare(k, 3, "{%-") == 0 || out.compare(k, 3, "{{-") == 0)) {
      while (!trimmed.empty() && IsSpace(trimmed.back())) trimmed.pop_back();
      trimmed += out.substr(k, 2);
      k += 3;
    } else if (out.compare(k, 3, "-%}") == 0 || out.compare(k, 3, "-}}") == 0) {
      trimmed += out.substr(k + 1, 2);
      k += 3;
      while (k < out.size() && IsSpace(out[k])) ++k;
    } else {
      trimmed += out[k++];
    }
  }
  return trimmed;
}

struct Token {
  enum class Kind {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kInt,
    kFloat,
    kString,
    kOp,
    kEnd
  };
  Kind kind;
  std::string text;
  int line;
};

absl::Status SyntaxError(int line, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("chat template line ", line, ": ", what));
}

absl::StatusOr<std::string> StringLiteral(const std::string& t, size_t& i,
                                          int line) {
  const char quote = t[i++];
  std::string s;
  while (i < t.size() && t[i] != quote) {
    char c = t[i++];
    if (c == '\\' && i < t.size()) {
      const char e = t[i++];
      switch (e) {
        case 'n':
          c = '\n';
          break;
        case 't':
          c = '\t';
          break;
        case 'r':
          c = '\r';
          break;
        case '\\':
        case '\'':
        case '"':
          c = e;
          break;
        default:
          s += '\\';
          c = e;
      }
    }
    s += c;
  }
  if (i >= t.size()) return SyntaxError(line, "a string is not closed");
  ++i;
  return s;
}

// The tokens of a tag's inside, from t[i] up to and including its closing
// delimiter.
absl::Status LexTag(const std::string& t, size_t& i, int& line, bool block,
                    std::vector<Token>& out) {
  static const char* const kOps[] = {
      "//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".",
      ",",  ":",  "|",  "~",  "+",  "-",  "*", "/", "%", "<", ">", "="};
  const std::string close = block ? "%}" : "}}";
  while (i < t.size()) {
    const char c = t[i];
    if (c == '\n') ++line;
    if (IsSpace(c)) {
      ++i;
    } else if (t.compare(i, 2, close) == 0) {
      out.push_back(
          {block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, close, line});
      i += 2;
      return absl::OkStatus();
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < t.size() &&
             (std::isalnum(static_cast<unsigned char>(t[j])) || t[j] == '_'))
        ++j;
      out.push_back({Token::Kind::kName, t.substr(i, j - i), line});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j])))
        ++j;
      bool is_float = j + 1 < t.size() && t[j] == '.' &&
                      std::isdigit(static_cast<unsigned char>(t[j + 1]));
      if (is_float) {
        ++j;
        while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j])))
          ++j;
      }
      out.push_back({is_float ? Token::Kind::kFloat : Token::Kind::kInt,
                     t.substr(i, j - i), line});
      i = j;
    } else if (c == '\'' || c == '"') {
      ASSIGN_OR_RETURN(std::string s, StringLiteral(t, i, line));
      out.push_back({Token::Kind::kString, std::move(s), line});
    } else {
      bool matched = false;
      for (const char* op : kOps) {
        if (t.compare(i, std::char_traits<char>::length(op), op) == 0) {
          out.push_back({Token::Kind::kOp, op, line});
          i += std::char_traits<char>::length(op);
          matched = true;
          break;
        }
      }
      if (!matched)
        return SyntaxError(line, absl::StrCat("unexpected character '",
                                              std::string(1, c), "'"));
    }
  }
  return SyntaxError(line, absl::StrCat("a tag is not closed with ", close));
}

absl::StatusOr<std::vector<Token>> Lex(const std::string& t) {
  std::vector<Token> out;
  int line = 1;
  size_t i = 0;
  while (i < t.size()) {
    const size_t var = t.find("{{", i), block = t.find("{%", i);
    const size_t tag = std::min(var, block);
    const std::string text =
        t.substr(i, tag == std::string::npos ? std::string::npos : tag - i);
    if (!text.empty()) out.push_back({Token::Kind::kText, text, line});
    for (char c : text) line += c == '\n';
    if (tag == std::string::npos) break;
    const bool is_block = tag == block;
    out.push_back({is_block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin,
                   "", line});
    i = tag + 2;
    RETURN_IF_ERROR(LexTag(t, i, line, is_block, out));
  }
  out.push_back({Token::Kind::kEnd, "", line});
  return out;
}

// The filters, tests and functions the renderer has (jinja_render.cc): anything
// else is refused while parsing.
const std::set<std::string>& KnownFilters() {
  static const std::set<std::string> k = {
      "length", "count",   "trim",    "tojson",     "items",      "string",
      "lower",  "upper",   "title",   "capitalize", "first",      "last",
      "join",   "default", "d",       "list",       "reverse",    "int",
      "float",  "abs",     "replace", "selectattr", "rejectattr", "map",
      "unique", "safe",    "e",       "escape",     "sum"};
  return k;
}
const std::set<std::string>& KnownTests() {
  static const std::set<std::string> k = {
      "defined", "undefined", "none", "string",  "number",   "integer",
      "float",   "boolean",   "true", "false",   "iterable", "sequence",
      "mapping", "even",      "odd",  "equalto", "eq",       "divisibleby",
      "in",      "lower",     "upper"};
  return k;
}
const std::set<std::string>& KnownFunctions() {
  static const std::set<std::string> k = {"namespace", "raise_exception",
                                          "range", "dict", "strftime_now"};
  return k;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  absl::StatusOr<std::vector<Node>> ParseAll() {
    std::string end;
    ASSIGN_OR_RETURN(auto nodes, ParseBody({}, &end));
    return nodes;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    return t_[std::min(pos_ + ahead, t_.size() - 1)];
  }
  Token Next() { return t_[std::min(pos_++, t_.size() - 1)]; }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kOp && Peek(ahead).text == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kName && Peek(ahead).text == name;
  }
  absl::Status Expect(Token::Kind kind, const char* text, const char* what) {
    const Token& k = Peek();
    if (k.kind != kind || (text != nullptr && k.text != text)) {
      return SyntaxError(
          k.line, absl::StrCat("expected ", what, ", found '", k.text, "'"));
    }
    ++pos_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().kind != Token::Kind::kName) {
      return SyntaxError(Peek().line, absl::StrCat("expected a name, found '",
                                                   Peek().text, "'"));
    }
    return Next().text;
  }

  // Nodes up to a block tag whose keyword is in `ends` (its keyword in *end,
  // the tag's
  // `{% keyword` consumed), or the end of the template when `ends` is empty.
  absl::StatusOr<std::vector<Node>> ParseBody(const std::set<std::string>& ends,
                                              std::string* end);
  absl::StatusOr<Node> ParseIf(int line);
  absl::StatusOr<Node> ParseFor(int line);
  absl::StatusOr<Node> ParseSet(int line);

  using ExprPtr = std::unique_ptr<Expr>;
  static ExprPtr Make(Expr::Kind kind, int line, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->name = std::move(name);
    return e;
  }
  static ExprPtr Binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = Make(Expr::Kind::kBinary, a->line, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  absl::StatusOr<ExprPtr> ParseExpr();
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseAdd();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMul();
  absl::StatusOr<ExprPtr> ParseUnary();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr e);
  absl::StatusOr<ExprPtr> ParseFiltersAndTests(ExprPtr e);
  absl::StatusOr<ExprPtr> ParsePrimary();
  // `(a, b, k=v)` after the open parenthesis into e's args (after those it has)
  // and kwargs.
  absl::Status ParseArgs(Expr& e);

  std::vector<Token> t_;
  size_t pos_ = 0;
};

absl::StatusOr<std::vector<Node>> Parser::ParseBody(
    const std::set<std::string>& ends, std::string* end) {
  std::vector<Node> nodes;
  while (true) {
    const Token tok = Next();
    switch (tok.kind) {
      case Token::Kind::kEnd:
        if (!ends.empty()) {
          return SyntaxError(
              tok.line, absl::StrCat("missing {% ", *ends.rbegin(), " %}"));
        }
        return nodes;
      case Token::Kind::kText: {
        Node n;
        n.kind = Node::Kind::kText;
        n.text = tok.text;
        nodes.push_back(std::move(n));
        break;
      }
      case Token::Kind::kVarBegin: {
        Node n;
        n.kind = Node::Kind::kOutput;
        n.line = tok.line;
        ASSIGN_OR_RETURN(n.expr, ParseExpr());
        RETURN_IF_ERROR(Expect(Token::Kind::kVarEnd, "}}", "'}}'"));
        nodes.push_back(std::move(n));
        break;
      }
      case Token::Kind::kBlockBegin: {
        ASSIGN_OR_RETURN(std::string keyword, ExpectName());
        if (ends.count(keyword)) {
          *end = keyword;
          return nodes;
        }
        absl::StatusOr<Node> n;
        if (keyword == "if") {
          n = ParseIf(tok.line);
        } else if (keyword == "for") {
          n = ParseFor(tok.line);
        } else if (keyword == "set") {
          n = ParseSet(tok.line);
        } else if (keyword == "break" || keyword == "continue") {
          Node b;
          b.kind =
              keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
          RETURN_IF_ERROR(Expect(Token::Kind::kBlockEnd, "%}", "'%}'"));
          n = std::move(b);
        } else if (keyword == "generation" || keyword == "endgeneration") {
          // transformers' assistant-mask markers: they print nothing.
          RETURN_IF_ERROR(Expect(Token::Kind::kBlockEnd, "%}", "'%}'"));
          continue;
        } else {
          return SyntaxError(
              tok.line,
              absl::StrCat("'{% ", keyword,
                           " %}' is not supported (the subset has if, "
                           "for, set, break, continue)"));
        }
        if (!n.ok()) return n.status();
        nodes.push_back(std::move(*n));
        break;
      }
      default:
        return SyntaxError(tok.line,
                           absl::StrCat("unexpected '", tok.text, "'"));
    }
  }
}

absl::StatusOr<Node> Parser::ParseIf(int line) {
  Node n;
  n.kind = Node::Kind::kIf;
  n.line = line;
  ASSIGN_OR_RETURN(ExprPtr cond, ParseExpr());
  RETURN_IF_ERROR(Expect(Token::Kind::kBlockEnd, "%}", "'%}'"));
  while (true) {
    std::string end;
    ASSIGN_OR_RETURN(auto body, ParseBody({"elif", "else", "endif"}, &end));
    n.branches.emplace_back(std::move(cond), std::move(body));
    if (end == "endif") break;
    if (end == "elif") {
      ASSIGN_OR_RETURN(cond, ParseExpr());
    } else {
      cond = nullptr;
    }
    RETURN_IF_ERROR(Expect(Token::Kind::kBlockEnd, "%}", "'%}'"));
    if (end == "else") {
      ASSIGN_OR_RETURN(auto rest, ParseBody({"endif"}, &end));
      n.branches.emplace_back(nullptr, std::move(rest));
      break;
    }
  }
  RETURN_IF_ERROR(Expect(Token::Kind::kBlockEnd, "%}", "'%}'"));
  return n;
}

absl::StatusOr<Node> Parser::ParseFor(int line) {
  Node n;
  n.kind = Node::Kind::kFor;
  n.line = line;
  do {
    ASSIGN_OR_RETURN(std::string target, ExpectName());
    n.targets.push_back(std::move(target));
  } while (IsOp(",") && (++pos_, true));
  RETURN_IF_ERROR(Expect(Token::Kind::kName, "in", "'in'"));
  // The iterable stops before a loop filter's `if` (no ternary there).
  ASSIGN_OR_RETURN(n.expr, ParseOr());
  if (IsName("if")) {
    ++pos_;
    ASSIGN_OR_RETURN(n.filter, ParseOr());
  }
  RETURN_IF_ERROR(Expect(Token::Kind::kBlockEnd, "%}", "'%}'"));
  std::string end;
  ASSIGN_OR_RETURN(n.body, ParseBody({"else", "endfor"}, &end));
  RETURN_IF_ERROR(Expect(Token::Kind::kBlockEnd, "%}", "'%}'"));
  if (end == "else") {
    ASSIGN_OR_RETURN(n.else_body, ParseBody({"endfor"}, &end));
    RETURN_IF_ERROR(Expect(Token::Kind::kBlockEnd, "%}", "'%}'"));
  }
  return n;
}

absl::StatusOr<Node> Parser::ParseSet(int line) {
  Node n;
  n.kind = Node::Kind::kSet;
  n.line = line;
  ASSIGN_OR_RETURN(std::string target, ExpectName());
  n.targets.push_back(std::move(target));
  if (IsOp(".")) {
    ++pos_;
    ASSIGN_OR_RETURN(n.attr, ExpectName());
  }
  if (!IsOp("=")) {
    return SyntaxError(line,
                       "'{% set %}' blocks (without '=') are not supported");
  }
  ++pos_;
  ASSIGN_OR_RETURN(n.expr, ParseExpr());
  RETURN_IF_ERROR(Expect(Token::Kind::kBlockEnd, "%}", "'%}'"));
  return n;
}

absl::StatusOr<Parser::ExprPtr> Parser::ParseExpr() {
  ASSIGN_OR_RETURN(ExprPtr value, ParseOr());
  if (!IsName("if")) return value;
  ++pos_;
  auto e = Make(Expr::Kind::kTernary, value->line);
  ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
  e->args.push_back(std::move(value));
  e->args.push_back(std::move(cond));
  if (IsName("else")) {
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr other, ParseExpr());
    e->args.push_back(std::move(other));
  } else {
    e->args.push_back(nullptr);
  }
  return e;
}

absl::StatusOr<Parser::ExprPtr> Parser::ParseOr() {
  ASSIGN_OR_RETURN(ExprPtr e, ParseAnd());
  while (IsName("or")) {
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr rhs, ParseAnd());
    e = Binary("or", std::move(e), std::move(rhs));
  }
  return e;
}

absl::StatusOr<Parser::ExprPtr> Parser::ParseAnd() {
  ASSIGN_OR_RETURN(ExprPtr e, ParseNot());
  while (IsName("and")) {
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr rhs, ParseNot());
    e = Binary("and", std::move(e), std::move(rhs));
  }
  return e;
}

absl::StatusOr<Parser::ExprPtr> Parser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  const int line = Next().line;
  ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  auto e = Make(Expr::Kind::kUnary, line, "not");
  e->args.push_back(std::move(operand));
  return e;
}

absl::StatusOr<Parser::ExprPtr> Parser::ParseCompare() {
  ASSIGN_OR_RETURN(ExprPtr e, ParseAdd());
  while (true) {
    std::string op;
    if (Peek().kind == Token::Kind::kOp &&
        (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
         Peek().text == ">" || Peek().text == "<=" || Peek().text == ">=")) {
      op = Next().text;
    } else if (IsName("in")) {
      ++pos_;
      op = "in";
    } else if (IsName("not") && IsName("in", 1)) {
      pos_ += 2;
      op = "not in";
    } else {
      return e;
    }
    ASSIGN_OR_RETURN(ExprPtr rhs, ParseAdd());
    e = Binary(op, std::move(e), std::move(rhs));
  }
}

absl::StatusOr<Parser::ExprPtr> Parser::ParseAdd() {
  ASSIGN_OR_RETURN(ExprPtr e, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    const std::string op = Next().text;
    ASSIGN_OR_RETURN(ExprPtr rhs, ParseConcat());
    e = Binary(op, std::move(e), std::move(rhs));
  }
  return e;
}

absl::StatusOr<Parser::ExprPtr> Parser::ParseConcat() {
  ASSIGN_OR_RETURN(ExprPtr e, ParseMul());
  while (IsOp("~")) {
    ++pos_;
    ASSIGN_OR_RETURN(ExprPtr rhs, ParseMul());
    e = Binary("~", std::move(e), std::move(rhs));
  }
  return e;
}

absl::StatusOr<Parser::ExprPtr> Parser::ParseMul() {
  ASSIGN_OR_RETURN(ExprPtr e, ParseUnary());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const std::string op = Next().text;
    ASSIGN_OR_RETURN(ExprPtr rhs, ParseUnary());
    e = Binary(op, std::move(e), std::move(rhs));
  }
  return e;
}

absl::StatusOr<Parser::ExprPtr> Parser::ParseUnary() {
  if (IsOp("-") || IsOp("+")) {
    const Token op = Next();
    ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary());
    auto e = Make(Expr::Kind::kUnary, op.line, op.text);
    e->args.push_back(std::move(operand));
    return ParseFiltersAndTests(std::move(e));
  }
  ASSIGN_OR_RETURN(ExprPtr primary, ParsePrimary());
  ASSIGN_OR_RETURN(ExprPtr e, ParsePostfix(std::move(primary)));
  return ParseFiltersAndTests(std::move(e));
}

absl::Status Parser::ParseArgs(Expr& e) {
  while (!IsOp(")")) {
    if (Peek().kind == Token::Kind::kName && IsOp("=", 1)) {
      std::string key = Next().text;
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr v, ParseExpr());
      e.kwargs.emplace_back(std::move(key), std::move(v));
    } else {
      ASSIGN_OR_RETURN(ExprPtr v, ParseExpr());
      e.args.push_back(std::move(v));
    }
    if (!IsOp(",")) break;
    ++pos_;
  }
  return Expect(Token::Kind::kOp, ")", "')'");
}

absl::StatusOr<Parser::ExprPtr> Parser::ParsePostfix(ExprPtr e) {
  while (true) {
    if (IsOp(".")) {
      ++pos_;
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      auto a = Make(Expr::Kind::kAttr, e->line, std::move(name));
      a->args.push_back(std::move(e));
      e = std::move(a);
    } else if (IsOp("[")) {
      ++pos_;
      std::vector<ExprPtr> parts(1);
      bool slice = false;
      while (!IsOp("]")) {
        if (IsOp(":")) {
          ++pos_;
          slice = true;
          parts.emplace_back();
          continue;
        }
        ASSIGN_OR_RETURN(parts.back(), ParseExpr());
      }
      ++pos_;
      if (!slice && parts[0] == nullptr)
        return SyntaxError(e->line, "an empty subscript");
      if (parts.size() > 3)
        return SyntaxError(e->line, "a slice has at most 3 parts");
      auto s = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kIndex, e->line);
      s->args.push_back(std::move(e));
      for (auto& p : parts) s->args.push_back(std::move(p));
      while (slice && s->args.size() < 4) s->args.push_back(nullptr);
      e = std::move(s);
    } else if (IsOp("(")) {
      ++pos_;
      if (e->kind == Expr::Kind::kName && !KnownFunctions().count(e->name)) {
        return SyntaxError(e->line, absl::StrCat("the function '", e->name,
                                                 "' is not supported"));
      }
      auto c = Make(Expr::Kind::kCall, e->line);
      c->args.push_back(std::move(e));
      RETURN_IF_ERROR(ParseArgs(*c));
      e = std::move(c);
    } else {
      return e;
    }
  }
}

absl::StatusOr<Parser::ExprPtr> Parser::ParseFiltersAndTests(ExprPtr e) {
  while (true) {
    if (IsOp("|")) {
      ++pos_;
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      if (!KnownFilters().count(name)) {
        return SyntaxError(
            e->line, absl::StrCat("the filter '", name, "' is not supported"));
      }
      auto f = Make(Expr::Kind::kFilter, e->line, std::move(name));
      f->args.push_back(std::move(e));
      if (IsOp("(")) {
        ++pos_;
        RETURN_IF_ERROR(ParseArgs(*f));
      }
      ASSIGN_OR_RETURN(e, ParsePostfix(std::move(f)));
    } else if (IsName("is")) {
      ++pos_;
      auto t = Make(Expr::Kind::kTest, e->line);
      if (IsName("not")) {
        ++pos_;
        t->negated = true;
      }
      ASSIGN_OR_RETURN(t->name, ExpectName());
      if (!KnownTests().count(t->name)) {
        return SyntaxError(
            e->line, absl::StrCat("the test '", t->name, "' is not supported"));
      }
      t->args.push_back(std::move(e));
      if (IsOp("(")) {
        ++pos_;
        RETURN_IF_ERROR(ParseArgs(*t));
      } else if (Peek().kind == Token::Kind::kString ||
                 Peek().kind == Token::Kind::kInt ||
                 (Peek().kind == Token::Kind::kName && !IsName("and") &&
                  !IsName("or") && !IsName("else") && !IsName("if") &&
                  !IsName("in") && !IsName("not"))) {
        ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        t->args.push_back(std::move(arg));
      }
      e = std::move(t);
    } else {
      return e;
    }
  }
}

absl::StatusOr<Parser::ExprPtr> Parser::ParsePrimary() {
  const Token tok = Next();
  switch (tok.kind) {
    case Token::Kind::kString: {
      auto e = Make(Expr::Kind::kLiteral, tok.line);
      e->literal = Value::Str(tok.text);
      // Adjacent literals concatenate, as in Python.
      while (Peek().kind == Token::Kind::kString) e->literal.s += Next().text;
      return e;
    }
    case Token::Kind::kInt:
    case Token::Kind::kFloat: {
      auto e = Make(Expr::Kind::kLiteral, tok.line);
      e->literal = tok.kind == Token::Kind::kInt
                       ? Value::Int(std::stoll(tok.text))
                       : Value::Float(std::stod(tok.text));
      return e;
    }
    case Token::Kind::kName: {
      auto e = Make(Expr::Kind::kLiteral, tok.line);
      if (tok.text == "true" || tok.text == "True") {
        e->literal = Value::Bool(true);
      } else if (tok.text == "false" || tok.text == "False") {
        e->literal = Value::Bool(false);
      } else if (tok.text == "none" || tok.text == "None") {
        e->literal = Value::None();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = tok.text;
      }
      return e;
    }
    case Token::Kind::kOp:
      if (tok.text == "(") {
        ASSIGN_OR_RETURN(ExprPtr inner, ParseExpr());
        if (IsOp(",")) return SyntaxError(tok.line, "tuples are not supported");
        RETURN_IF_ERROR(Expect(Token::Kind::kOp, ")", "')'"));
        return inner;
      }
      if (tok.text == "[") {
        auto e = Make(Expr::Kind::kList, tok.line);
        while (!IsOp("]")) {
          ASSIGN_OR_RETURN(ExprPtr item, ParseExpr());
          e->args.push_back(std::move(item));
          if (!IsOp(",")) break;
          ++pos_;
        }
        RETURN_IF_ERROR(Expect(Token::Kind::kOp, "]", "']'"));
        return e;
      }
      if (tok.text == "{") {
        auto e = Make(Expr::Kind::kDict, tok.line);
        while (!IsOp("}")) {
          if (Peek().kind != Token::Kind::kString) {
            return SyntaxError(tok.line, "dict keys must be string literals");
          }
          std::string key = Next().text;
          RETURN_IF_ERROR(Expect(Token::Kind::kOp, ":", "':'"));
          ASSIGN_OR_RETURN(ExprPtr v, ParseExpr());
          e->kwargs.emplace_back(std::move(key), std::move(v));
          if (!IsOp(",")) break;
          ++pos_;
        }
        RETURN_IF_ERROR(Expect(Token::Kind::kOp, "}", "'}'"));
        return e;
      }
      [[fallthrough]];
    default:
      return SyntaxError(tok.line, absl::StrCat("unexpected '", tok.text, "'"));
  }
}

}  // namespace

absl::StatusOr<std::vector<Node>> ParseTemplate(const std::string& source) {
  ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(Preprocess(source)));
  return Parser(std::move(tokens)).ParseAll();
}

}  // namespace lrkv::jinja
