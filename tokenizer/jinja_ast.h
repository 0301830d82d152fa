// The syntax tree of a chat template (tokenizer/chat_template.h): what the parser
// (jinja_parser.cc) builds and the renderer (jinja_render.cc) walks.
#ifndef LRKV_TOKENIZER_JINJA_AST_H_
#define LRKV_TOKENIZER_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/jinja_value.h"

namespace lrkv::jinja {

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // [args...]
    kDict,     // {kwargs...}
    kAttr,     // args[0].name
    kIndex,    // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null where omitted)
    kCall,  // args[0](args[1..], kwargs): a function, or a method when args[0]
            // is kAttr
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..])
    kUnary,    // name ("not", "-", "+") args[0]
    kBinary,   // args[0] name args[1] ("and", "or", "==", "in", "not in", "+",
               // "~", ...)
    kTernary,  // args[0] if args[1] else args[2] (null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;  // kTest: "is not"
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kBreak, kContinue };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;            // kText
  std::unique_ptr<Expr> expr;  // kOutput, kFor (the iterable), kSet (the value)
  // kIf: each branch's condition and body (an else: a null condition).
  std::vector<std::pair<std::unique_ptr<Expr>, std::vector<Node>>> branches;
  // kFor: the loop variables, an optional `if` filter, the body and the else
  // body.
  std::vector<std::string> targets;
  std::unique_ptr<Expr> filter;
  std::vector<Node> body, else_body;
  // kSet: the variable, and the attribute for `set ns.attr = ...`.
  std::string attr;
};

// The template's nodes; InvalidArgument naming the construct (and its line)
// that the subset does not have, or the syntax error.
absl::StatusOr<std::vector<Node>> ParseTemplate(const std::string& source);

// Renders `nodes` with the variables of `context` (a dict).
absl::StatusOr<std::string> RenderTemplate(const std::vector<Node>& nodes,
                                           const Value& context);

}  // namespace lrkv::jinja

#endif  // LRKV_TOKENIZER_JINJA_AST_H_
