// Rendering a parsed chat template: Jinja's semantics for the subset (scoping
// as in Jinja: a for loop's body has its own variables, namespace() objects are
// shared).
#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "tokenizer/jinja_ast.h"

namespace lrkv::jinja {
namespace {

using Kind = Value::Kind;

absl::Status Error(int line, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("chat template line ", line, ": ", what));
}

// Python's str.strip family: `chars` (default whitespace) off the left and/or
// right.
std::string Strip(const std::string& s, const Value& chars, bool left,
                  bool right) {
  const std::string set =
      chars.kind == Kind::kString ? chars.s : std::string(" \t\n\r\f\v");
  size_t b = 0, e = s.size();
  while (left && b < e && set.find(s[b]) != std::string::npos) ++b;
  while (right && e > b && set.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

// Python's str.split (sep None: runs of whitespace).
Value Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List parts;
  if (sep.kind != Kind::kString) {
    size_t i = 0;
    while (true) {
      while (i < s.size() &&
             absl::ascii_isspace(static_cast<unsigned char>(s[i])))
        ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(Value::Str(Strip(s.substr(i), Value(), false, true)));
        break;
      }
      size_t j = i;
      while (j < s.size() &&
             !absl::ascii_isspace(static_cast<unsigned char>(s[j])))
        ++j;
      parts.push_back(Value::Str(s.substr(i, j - i)));
      i = j;
    }
    return Value::NewList(std::move(parts));
  }
  size_t start = 0;
  while (true) {
    const size_t at = sep.s.empty() ? std::string::npos : s.find(sep.s, start);
    if (at == std::string::npos ||
        (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
      parts.push_back(Value::Str(s.substr(start)));
      break;
    }
    parts.push_back(Value::Str(s.substr(start, at - start)));
    start = at + sep.s.size();
  }
  return Value::NewList(std::move(parts));
}

// The elements a for loop (or a filter) walks: a list's items, a dict's keys, a
// string's characters (UTF-8 sequences).
absl::StatusOr<List> Items(const Value& v, int line) {
  switch (v.kind) {
    case Kind::kList:
      return *v.list;
    case Kind::kDict: {
      List keys;
      for (const auto& kv : *v.dict) keys.push_back(Value::Str(kv.first));
      return keys;
    }
    case Kind::kString: {
      List chars;
      for (size_t i = 0; i < v.s.size();) {
        size_t n = 1;
        while (i + n < v.s.size() &&
               (static_cast<unsigned char>(v.s[i + n]) & 0xC0) == 0x80)
          ++n;
        chars.push_back(Value::Str(v.s.substr(i, n)));
        i += n;
      }
      return chars;
    }
    case Kind::kUndefined:
    case Kind::kNone:
      return List{};
    default:
      return Error(line, absl::StrCat("a ", KindName(v), " is not iterable"));
  }
}

int64_t Length(const Value& v) {
  switch (v.kind) {
    case Kind::kString: {
      int64_t n = 0;
      for (unsigned char c : v.s) n += (c & 0xC0) != 0x80;
      return n;
    }
    case Kind::kList:
      return static_cast<int64_t>(v.list->size());
    case Kind::kDict:
      return static_cast<int64_t>(v.dict->size());
    default:
      return 0;
  }
}

// Python's slice of a list or string (strings by byte: templates slice ASCII).
Value Slice(const Value& v, const Value& start, const Value& stop,
            const Value& step_v) {
  const int64_t n = v.kind == Kind::kList ? static_cast<int64_t>(v.list->size())
                                          : static_cast<int64_t>(v.s.size());
  const int64_t step = step_v.kind == Kind::kInt ? step_v.i : 1;
  auto clamp = [&](const Value& x, int64_t fallback) {
    if (x.kind != Kind::kInt) return fallback;
    int64_t k = x.i < 0 ? x.i + n : x.i;
    return step > 0 ? std::clamp<int64_t>(k, 0, n)
                    : std::clamp<int64_t>(k, -1, n - 1);
  };
  const int64_t b = clamp(start, step > 0 ? 0 : n - 1),
                e = clamp(stop, step > 0 ? n : -1);
  List items;
  std::string text;
  for (int64_t k = b; step > 0 ? k < e : k > e; k += step) {
    if (v.kind == Kind::kList) {
      items.push_back((*v.list)[k]);
    } else {
      text += v.s[k];
    }
  }
  return v.kind == Kind::kList ? Value::NewList(std::move(items))
                               : Value::Str(std::move(text));
}

class Renderer {
 public:
  explicit Renderer(const Value& context) {
    scopes_.emplace_back(*context.dict);
  }

  enum class Flow { kNormal, kBreak, kContinue };
  absl::StatusOr<Flow> Run(const std::vector<Node>& nodes);
  std::string& out() { return out_; }

 private:
  absl::StatusOr<Flow> RunFor(const Node& n);
  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> EvalBinary(const Expr& e);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<Value> EvalMethod(const Expr& e, const Value& self,
                                   const std::string& name,
                                   const std::vector<Value>& args);
  absl::StatusOr<Value> EvalFilter(const Expr& e);
  // The filters over a sequence's items (`v` itself, as a list or a string's
  // characters): list, first, last, reverse, join, selectattr, rejectattr, map,
  // unique, sum.
  absl::StatusOr<Value> EvalSequenceFilter(const Expr& e, const Value& v,
                                           List items,
                                           const std::vector<Value>& args);
  absl::StatusOr<bool> EvalTest(const Expr& e);
  absl::StatusOr<std::vector<Value>> EvalArgs(const Expr& e, size_t first);
  absl::StatusOr<Value> Kwarg(const Expr& e, const std::string& key,
                              Value fallback);

  Value Lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      for (const auto& [k, v] : *s) {
        if (k == name) return v;
      }
    }
    return Value();
  }
  void Assign(const std::string& name, Value v) {
    for (auto& [k, old] : scopes_.back()) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    scopes_.back().emplace_back(name, std::move(v));
  }

  std::vector<Dict> scopes_;
  std::string out_;
};

absl::StatusOr<Renderer::Flow> Renderer::Run(const std::vector<Node>& nodes) {
  for (const Node& n : nodes) {
    switch (n.kind) {
      case Node::Kind::kText:
        out_ += n.text;
        break;
      case Node::Kind::kOutput: {
        ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
        out_ += ToText(v);
        break;
      }
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          bool take = cond == nullptr;
          if (!take) {
            ASSIGN_OR_RETURN(Value c, Eval(*cond));
            take = Truthy(c);
          }
          if (take) {
            ASSIGN_OR_RETURN(Flow f, Run(body));
            if (f != Flow::kNormal) return f;
            break;
          }
        }
        break;
      case Node::Kind::kFor: {
        ASSIGN_OR_RETURN(Flow f, RunFor(n));
        (void)f;
        break;
      }
      case Node::Kind::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*n.expr));
        if (n.attr.empty()) {
          Assign(n.targets[0], std::move(v));
        } else {
          const Value ns = Lookup(n.targets[0]);
          if (ns.kind != Kind::kDict) {
            return Error(n.line, absl::StrCat("'", n.targets[0],
                                              "' is not a namespace"));
          }
          ns.Set(n.attr, std::move(v));
        }
        break;
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
    }
  }
  return Flow::kNormal;
}

absl::StatusOr<Renderer::Flow> Renderer::RunFor(const Node& n) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*n.expr));
  ASSIGN_OR_RETURN(List all, Items(iterable, n.line));
  // Bind an item to the loop variables (two names unpack a pair).
  auto bind = [&](const Value& item) -> absl::Status {
    if (n.targets.size() == 1) {
      Assign(n.targets[0], item);
      return absl::OkStatus();
    }
    if (item.kind != Kind::kList || item.list->size() != n.targets.size()) {
      return Error(n.line,
                   "cannot unpack the loop item into the loop variables");
    }
    for (size_t k = 0; k < n.targets.size(); ++k)
      Assign(n.targets[k], (*item.list)[k]);
    return absl::OkStatus();
  };
  scopes_.emplace_back();
  List items;
  for (const Value& item : all) {
    if (n.filter) {
      RETURN_IF_ERROR(bind(item));
      ASSIGN_OR_RETURN(Value keep, Eval(*n.filter));
      if (!Truthy(keep)) continue;
    }
    items.push_back(item);
  }
  const auto length = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < length; ++k) {
    RETURN_IF_ERROR(bind(items[k]));
    Assign("loop", Value::NewDict({{"index", Value::Int(k + 1)},
                                   {"index0", Value::Int(k)},
                                   {"revindex", Value::Int(length - k)},
                                   {"revindex0", Value::Int(length - k - 1)},
                                   {"first", Value::Bool(k == 0)},
                                   {"last", Value::Bool(k + 1 == length)},
                                   {"length", Value::Int(length)},
                                   {"previtem", k > 0 ? items[k - 1] : Value()},
                                   {"nextitem",
                                    k + 1 < length ? items[k + 1] : Value()}}));
    auto flow = Run(n.body);
    if (!flow.ok()) return flow.status();
    if (*flow == Flow::kBreak) break;
  }
  scopes_.pop_back();
  if (length == 0) return Run(n.else_body);
  return Flow::kNormal;
}

absl::StatusOr<std::vector<Value>> Renderer::EvalArgs(const Expr& e,
                                                      size_t first) {
  std::vector<Value> args;
  for (size_t k = first; k < e.args.size(); ++k) {
    ASSIGN_OR_RETURN(Value v, Eval(*e.args[k]));
    args.push_back(std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Renderer::Kwarg(const Expr& e, const std::string& key,
                                      Value fallback) {
  for (const auto& [k, v] : e.kwargs) {
    if (k == key) return Eval(*v);
  }
  return fallback;
}

absl::StatusOr<Value> Renderer::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName: {
      Value v = Lookup(e.name);
      // The one function templates test for (`strftime_now is defined`), as
      // transformers and @huggingface/jinja define it.
      if (!v.defined() && e.name == "strftime_now") {
        v = Value::Str("<built-in function strftime_now>");
      }
      return v;
    }
    case Expr::Kind::kList: {
      ASSIGN_OR_RETURN(std::vector<Value> items, EvalArgs(e, 0));
      return Value::NewList(std::move(items));
    }
    case Expr::Kind::kDict: {
      Value d = Value::NewDict();
      for (const auto& [k, v] : e.kwargs) {
        ASSIGN_OR_RETURN(Value x, Eval(*v));
        d.Set(k, std::move(x));
      }
      return d;
    }
    case Expr::Kind::kAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      if (obj.kind == Kind::kUndefined) {
        return Error(e.line,
                     absl::StrCat("'.", e.name, "' of an undefined value"));
      }
      return obj.Get(e.name);
    }
    case Expr::Kind::kIndex: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
      if (obj.kind == Kind::kDict && key.kind == Kind::kString)
        return obj.Get(key.s);
      if ((obj.kind == Kind::kList || obj.kind == Kind::kString) &&
          key.kind == Kind::kInt) {
        const int64_t n = obj.kind == Kind::kList
                              ? static_cast<int64_t>(obj.list->size())
                              : static_cast<int64_t>(obj.s.size());
        const int64_t k = key.i < 0 ? key.i + n : key.i;
        if (k < 0 || k >= n) return Value();
        return obj.kind == Kind::kList ? (*obj.list)[k]
                                       : Value::Str(obj.s.substr(k, 1));
      }
      if (obj.kind == Kind::kUndefined)
        return Error(e.line, "indexing an undefined value");
      return Value();
    }
    case Expr::Kind::kSlice: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      if (obj.kind != Kind::kList && obj.kind != Kind::kString) {
        return Error(e.line, absl::StrCat("cannot slice a ", KindName(obj)));
      }
      Value parts[3];
      for (int k = 0; k < 3; ++k) {
        if (e.args[k + 1]) {
          ASSIGN_OR_RETURN(parts[k], Eval(*e.args[k + 1]));
        }
      }
      if (parts[2].kind == Kind::kInt && parts[2].i == 0)
        return Error(e.line, "a slice step of 0");
      return Slice(obj, parts[0], parts[1], parts[2]);
    }
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter:
      return EvalFilter(e);
    case Expr::Kind::kTest: {
      ASSIGN_OR_RETURN(bool t, EvalTest(e));
      return Value::Bool(t != e.negated);
    }
    case Expr::Kind::kUnary: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      if (e.name == "not") return Value::Bool(!Truthy(v));
      if (!v.is_number())
        return Error(e.line, absl::StrCat("'", e.name, "' of a ", KindName(v)));
      if (e.name == "+") return v;
      return v.kind == Kind::kFloat
                 ? Value::Float(-v.f)
                 : Value::Int(-static_cast<int64_t>(v.number()));
    }
    case Expr::Kind::kBinary:
      return EvalBinary(e);
    case Expr::Kind::kTernary: {
      ASSIGN_OR_RETURN(Value cond, Eval(*e.args[1]));
      if (Truthy(cond)) return Eval(*e.args[0]);
      return e.args[2] ? Eval(*e.args[2]) : Value();
    }
  }
  return Value();
}

absl::StatusOr<Value> Renderer::EvalBinary(const Expr& e) {
  ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
  const std::string& op = e.name;
  if (op == "and") return Truthy(a) ? Eval(*e.args[1]) : a;
  if (op == "or") return Truthy(a) ? a : Eval(*e.args[1]);
  ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
  if (op == "==") return Value::Bool(Equal(a, b));
  if (op == "!=") return Value::Bool(!Equal(a, b));
  if (op == "<" || op == ">=") {
    ASSIGN_OR_RETURN(bool less, Less(a, b));
    return Value::Bool(op == "<" ? less : !less);
  }
  if (op == ">" || op == "<=") {
    ASSIGN_OR_RETURN(bool greater, Less(b, a));
    return Value::Bool(op == ">" ? greater : !greater);
  }
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.kind == Kind::kString) {
      if (a.kind != Kind::kString)
        return Error(e.line, "'in <string>' needs a string on the left");
      found = absl::StrContains(b.s, a.s);
    } else if (b.kind == Kind::kList) {
      found = std::any_of(b.list->begin(), b.list->end(),
                          [&](const Value& x) { return Equal(a, x); });
    } else if (b.kind == Kind::kDict) {
      found = a.kind == Kind::kString && b.Get(a.s).defined();
    } else if (b.defined() && b.kind != Kind::kNone) {
      return Error(e.line, absl::StrCat("'in' a ", KindName(b)));
    }
    return Value::Bool(found == (op == "in"));
  }
  if (op == "~") return Value::Str(ToText(a) + ToText(b));
  if (op == "+") {
    if (a.kind == Kind::kString && b.kind == Kind::kString)
      return Value::Str(a.s + b.s);
    if (a.kind == Kind::kList && b.kind == Kind::kList) {
      List items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return Value::NewList(std::move(items));
    }
  }
  if (op == "*" && a.kind == Kind::kString && b.kind == Kind::kInt) {
    std::string s;
    for (int64_t k = 0; k < b.i; ++k) s += a.s;
    return Value::Str(s);
  }
  if (!a.is_number() || !b.is_number()) {
    return Error(e.line, absl::StrCat("'", op, "' of a ", KindName(a),
                                      " and a ", KindName(b)));
  }
  const bool ints = a.kind != Kind::kFloat && b.kind != Kind::kFloat;
  const double x = a.number(), y = b.number();
  if ((op == "/" || op == "//" || op == "%") && y == 0)
    return Error(e.line, "division by zero");
  if (op == "+")
    return ints ? Value::Int(static_cast<int64_t>(x + y)) : Value::Float(x + y);
  if (op == "-")
    return ints ? Value::Int(static_cast<int64_t>(x - y)) : Value::Float(x - y);
  if (op == "*")
    return ints ? Value::Int(static_cast<int64_t>(x * y)) : Value::Float(x * y);
  if (op == "/") return Value::Float(x / y);
  if (op == "//")
    return ints ? Value::Int(static_cast<int64_t>(std::floor(x / y)))
                : Value::Float(std::floor(x / y));
  if (op == "%") {
    const double m =
        x - y * std::floor(x / y);  // Python's sign follows the divisor
    return ints ? Value::Int(static_cast<int64_t>(m)) : Value::Float(m);
  }
  return Error(e.line,
               absl::StrCat("the operator '", op, "' is not supported"));
}

absl::StatusOr<Value> Renderer::EvalCall(const Expr& e) {
  const Expr& callee = *e.args[0];
  ASSIGN_OR_RETURN(std::vector<Value> args, EvalArgs(e, 1));
  if (callee.kind == Expr::Kind::kAttr) {
    ASSIGN_OR_RETURN(Value self, Eval(*callee.args[0]));
    return EvalMethod(e, self, callee.name, args);
  }
  if (callee.kind != Expr::Kind::kName)
    return Error(e.line, "this value cannot be called");
  if (callee.name == "raise_exception") {
    return absl::InvalidArgumentError(
        args.empty() ? "the chat template raised an exception"
                     : ToText(args[0]));
  }
  if (callee.name == "strftime_now") {
    if (args.empty() || args[0].kind != Kind::kString) {
      return Error(e.line, "strftime_now() takes a format string");
    }
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, args[0].s.c_str(), &local);
    return Value::Str(std::string(buf, n));
  }
  if (callee.name == "namespace" || callee.name == "dict") {
    Value ns = Value::NewDict();
    for (const auto& [k, v] : e.kwargs) {
      ASSIGN_OR_RETURN(Value x, Eval(*v));
      ns.Set(k, std::move(x));
    }
    return ns;
  }
  if (callee.name == "range") {
    int64_t start = 0, stop = 0, step = 1;
    for (const Value& a : args) {
      if (a.kind != Kind::kInt) return Error(e.line, "range() takes integers");
    }
    if (args.size() == 1) stop = args[0].i;
    if (args.size() >= 2) start = args[0].i, stop = args[1].i;
    if (args.size() == 3) step = args[2].i;
    if (args.empty() || args.size() > 3 || step == 0)
      return Error(e.line, "range() takes 1 to 3 arguments");
    List items;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
      items.push_back(Value::Int(k));
    return Value::NewList(std::move(items));
  }
  return Error(e.line, absl::StrCat("the function '", callee.name,
                                    "' is not supported"));
}

absl::StatusOr<Value> Renderer::EvalMethod(const Expr& e, const Value& self,
                                           const std::string& name,
                                           const std::vector<Value>& args) {
  auto arg = [&](size_t k) { return k < args.size() ? args[k] : Value(); };
  if (self.kind == Kind::kString) {
    const std::string& s = self.s;
    if (name == "startswith" || name == "endswith") {
      if (arg(0).kind != Kind::kString)
        return Error(e.line, absl::StrCat(name, "() takes a string"));
      return Value::Bool(name == "startswith" ? absl::StartsWith(s, arg(0).s)
                                              : absl::EndsWith(s, arg(0).s));
    }
    if (name == "strip") return Value::Str(Strip(s, arg(0), true, true));
    if (name == "lstrip") return Value::Str(Strip(s, arg(0), true, false));
    if (name == "rstrip") return Value::Str(Strip(s, arg(0), false, true));
    if (name == "split")
      return Split(s, arg(0), arg(1).kind == Kind::kInt ? arg(1).i : -1);
    if (name == "upper") return Value::Str(absl::AsciiStrToUpper(s));
    if (name == "lower") return Value::Str(absl::AsciiStrToLower(s));
    if (name == "replace" && arg(0).kind == Kind::kString &&
        arg(1).kind == Kind::kString) {
      return Value::Str(absl::StrReplaceAll(s, {{arg(0).s, arg(1).s}}));
    }
  }
  if (self.kind == Kind::kDict) {
    if (name == "get") {
      if (arg(0).kind != Kind::kString)
        return Error(e.line, "get() takes a string key");
      const Value v = self.Get(arg(0).s);
      return v.defined() ? v : (args.size() > 1 ? args[1] : Value::None());
    }
    if (name == "items" || name == "keys" || name == "values") {
      List items;
      for (const auto& [k, v] : *self.dict) {
        if (name == "items")
          items.push_back(Value::NewList({Value::Str(k), v}));
        if (name == "keys") items.push_back(Value::Str(k));
        if (name == "values") items.push_back(v);
      }
      return Value::NewList(std::move(items));
    }
  }
  return Error(e.line, absl::StrCat("the method '", name, "' of a ",
                                    KindName(self), " is not supported"));
}

absl::StatusOr<bool> Renderer::EvalTest(const Expr& e) {
  ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
  ASSIGN_OR_RETURN(std::vector<Value> args, EvalArgs(e, 1));
  const std::string& t = e.name;
  if (t == "defined") return v.defined();
  if (t == "undefined") return !v.defined();
  if (t == "none") return v.kind == Kind::kNone;
  if (t == "string") return v.kind == Kind::kString;
  if (t == "number") return v.kind == Kind::kInt || v.kind == Kind::kFloat;
  if (t == "integer") return v.kind == Kind::kInt;
  if (t == "float") return v.kind == Kind::kFloat;
  if (t == "boolean") return v.kind == Kind::kBool;
  if (t == "true") return v.kind == Kind::kBool && v.b;
  if (t == "false") return v.kind == Kind::kBool && !v.b;
  if (t == "iterable")
    return v.kind == Kind::kString || v.kind == Kind::kList ||
           v.kind == Kind::kDict;
  if (t == "sequence")
    return v.kind == Kind::kString || v.kind == Kind::kList ||
           v.kind == Kind::kDict;
  if (t == "mapping") return v.kind == Kind::kDict;
  if (t == "lower")
    return v.kind == Kind::kString && absl::AsciiStrToLower(v.s) == v.s;
  if (t == "upper")
    return v.kind == Kind::kString && absl::AsciiStrToUpper(v.s) == v.s;
  if (t == "even" || t == "odd") {
    if (v.kind != Kind::kInt)
      return Error(e.line, absl::StrCat("'", t, "' of a ", KindName(v)));
    return (v.i % 2 == 0) == (t == "even");
  }
  if (args.empty())
    return Error(e.line, absl::StrCat("the test '", t, "' takes an argument"));
  if (t == "equalto" || t == "eq") return Equal(v, args[0]);
  if (t == "in") {
    const Value& c = args[0];
    if (c.kind == Kind::kString)
      return v.kind == Kind::kString && absl::StrContains(c.s, v.s);
    if (c.kind == Kind::kList) {
      return std::any_of(c.list->begin(), c.list->end(),
                         [&](const Value& x) { return Equal(v, x); });
    }
    return c.kind == Kind::kDict && v.kind == Kind::kString &&
           c.Get(v.s).defined();
  }
  if (t == "divisibleby") {
    if (v.kind != Kind::kInt || args[0].kind != Kind::kInt || args[0].i == 0) {
      return Error(e.line, "'divisibleby' takes non-zero integers");
    }
    return v.i % args[0].i == 0;
  }
  return Error(e.line, absl::StrCat("the test '", t, "' is not supported"));
}

absl::StatusOr<Value> Renderer::EvalFilter(const Expr& e) {
  ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
  ASSIGN_OR_RETURN(std::vector<Value> args, EvalArgs(e, 1));
  auto arg = [&](size_t k) { return k < args.size() ? args[k] : Value(); };
  const std::string& f = e.name;
  if (f == "length" || f == "count") return Value::Int(Length(v));
  if (f == "trim") return Value::Str(Strip(ToText(v), arg(0), true, true));
  if (f == "string") return Value::Str(ToText(v));
  if (f == "lower") return Value::Str(absl::AsciiStrToLower(ToText(v)));
  if (f == "upper") return Value::Str(absl::AsciiStrToUpper(ToText(v)));
  if (f == "safe" || f == "e" || f == "escape")
    return v;  // no autoescaping in chat templates
  if (f == "capitalize" || f == "title") {
    std::string s = absl::AsciiStrToLower(ToText(v));
    for (size_t k = 0; k < s.size(); ++k) {
      const bool start =
          k == 0 || (f == "title" && !absl::ascii_isalnum(
                                         static_cast<unsigned char>(s[k - 1])));
      if (start) s[k] = absl::ascii_toupper(static_cast<unsigned char>(s[k]));
    }
    return Value::Str(s);
  }
  if (f == "tojson") {
    ASSIGN_OR_RETURN(Value indent, Kwarg(e, "indent", arg(0)));
    return Value::Str(
        ToJson(v, indent.kind == Kind::kInt ? static_cast<int>(indent.i) : -1));
  }
  if (f == "default" || f == "d") {
    const bool boolean = Truthy(arg(1));
    return (boolean ? Truthy(v) : v.defined()) ? v : arg(0);
  }
  if (f == "int")
    return Value::Int(v.kind == Kind::kString
                          ? std::atoll(v.s.c_str())
                          : static_cast<int64_t>(v.number()));
  if (f == "float")
    return Value::Float(v.kind == Kind::kString ? std::atof(v.s.c_str())
                                                : v.number());
  if (f == "abs")
    return v.kind == Kind::kFloat ? Value::Float(std::fabs(v.f))
                                  : Value::Int(std::llabs(v.i));
  if (f == "replace") {
    if (arg(0).kind != Kind::kString || arg(1).kind != Kind::kString)
      return Error(e.line, "replace takes strings");
    return Value::Str(absl::StrReplaceAll(ToText(v), {{arg(0).s, arg(1).s}}));
  }
  if (f == "items") {
    if (v.kind != Kind::kDict)
      return Error(e.line, absl::StrCat("'items' of a ", KindName(v)));
    List items;
    for (const auto& [k, x] : *v.dict)
      items.push_back(Value::NewList({Value::Str(k), x}));
    return Value::NewList(std::move(items));
  }
  ASSIGN_OR_RETURN(List items, Items(v, e.line));
  return EvalSequenceFilter(e, v, std::move(items), args);
}

absl::StatusOr<Value> Renderer::EvalSequenceFilter(
    const Expr& e, const Value& v, List items, const std::vector<Value>& args) {
  auto arg = [&](size_t k) { return k < args.size() ? args[k] : Value(); };
  const std::string& f = e.name;
  if (f == "list") return Value::NewList(std::move(items));
  if (f == "first") return items.empty() ? Value() : items.front();
  if (f == "last") return items.empty() ? Value() : items.back();
  if (f == "reverse") {
    std::reverse(items.begin(), items.end());
    return v.kind == Kind::kString
               ? Value::Str(absl::StrJoin(
                     items, "",
                     [](std::string* o, const Value& x) { o->append(x.s); }))
               : Value::NewList(std::move(items));
  }
  if (f == "join") {
    ASSIGN_OR_RETURN(Value attribute, Kwarg(e, "attribute", Value()));
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      const Value x = attribute.kind == Kind::kString
                          ? items[k].Get(attribute.s)
                          : items[k];
      absl::StrAppend(&out, k ? ToText(arg(0)) : "", ToText(x));
    }
    return Value::Str(out);
  }
  if (f == "selectattr" || f == "rejectattr" || f == "map") {
    if (arg(0).kind != Kind::kString && f != "map")
      return Error(e.line, absl::StrCat(f, " takes an attribute name"));
    ASSIGN_OR_RETURN(Value attribute, Kwarg(e, "attribute", arg(0)));
    List out;
    for (const Value& x : items) {
      const Value a = x.Get(attribute.s);
      if (f == "map") {
        out.push_back(a);
        continue;
      }
      bool keep = Truthy(a);
      const std::string test = arg(1).kind == Kind::kString ? arg(1).s : "";
      if (test == "equalto" || test == "eq" || test == "==")
        keep = Equal(a, arg(2));
      else if (test == "defined")
        keep = a.defined();
      else if (test == "undefined")
        keep = !a.defined();
      else if (test == "none")
        keep = a.kind == Kind::kNone;
      else if (!test.empty())
        return Error(e.line, absl::StrCat("the test '", test, "' in ", f,
                                          " is not supported"));
      if (keep == (f == "selectattr")) out.push_back(x);
    }
    return Value::NewList(std::move(out));
  }
  if (f == "unique") {
    List out;
    for (const Value& x : items) {
      if (std::none_of(out.begin(), out.end(),
                       [&](const Value& y) { return Equal(x, y); }))
        out.push_back(x);
    }
    return Value::NewList(std::move(out));
  }
  if (f == "sum") {
    Value total = Value::Int(0);
    for (const Value& x : items) {
      if (!x.is_number()) return Error(e.line, "sum of a non-number");
      total = (total.kind == Kind::kFloat || x.kind == Kind::kFloat)
                  ? Value::Float(total.number() + x.number())
                  : Value::Int(total.i + x.i);
    }
    return total;
  }
  return Error(e.line, absl::StrCat("the filter '", f, "' is not supported"));
}

}  // namespace

absl::StatusOr<std::string> RenderTemplate(const std::vector<Node>& nodes,
                                           const Value& context) {
  Renderer r(context);
  ASSIGN_OR_RETURN(Renderer::Flow f, r.Run(nodes));
  (void)f;
  return std::move(r.out());
}

}  // namespace lrkv::jinja
