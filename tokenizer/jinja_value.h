// The values of the chat-template interpreter (tokenizer/chat_template.h): Jinja's
// undefined, none, booleans, integers, floats, strings, lists and dicts
// (ordered, as Python's), with Python's truthiness, equality, ordering and
// printing. Lists and dicts are shared, so that a namespace() set inside a loop
// is seen after it, as in Jinja.
#ifndef LRKV_TOKENIZER_JINJA_VALUE_H_
#define LRKV_TOKENIZER_JINJA_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lrkv::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;

struct Value {
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict
  };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;

  static Value None() { return Of(Kind::kNone); }
  static Value Bool(bool v) {
    Value x = Of(Kind::kBool);
    x.b = v;
    return x;
  }
  static Value Int(int64_t v) {
    Value x = Of(Kind::kInt);
    x.i = v;
    return x;
  }
  static Value Float(double v) {
    Value x = Of(Kind::kFloat);
    x.f = v;
    return x;
  }
  static Value Str(std::string v) {
    Value x = Of(Kind::kString);
    x.s = std::move(v);
    return x;
  }
  static Value NewList(List items = {}) {
    Value x = Of(Kind::kList);
    x.list = std::make_shared<List>(std::move(items));
    return x;
  }
  static Value NewDict(Dict items = {}) {
    Value x = Of(Kind::kDict);
    x.dict = std::make_shared<Dict>(std::move(items));
    return x;
  }

  bool defined() const { return kind != Kind::kUndefined; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  double number() const {
    return kind == Kind::kFloat ? f : kind == Kind::kBool ? b : i;
  }
  // The value at `key` of a dict; undefined when absent.
  Value Get(const std::string& key) const;
  // Sets `key` of a dict (in place: every holder of the dict sees it).
  void Set(const std::string& key, Value v) const;

 private:
  static Value Of(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
};

// Python's truthiness (undefined and none are false; empty strings, lists,
// dicts too).
bool Truthy(const Value& v);
// How {{ v }} prints: str(v) in Python ("None", "True", "1.0"; undefined prints
// "").
std::string ToText(const Value& v);
// Python's repr of strings inside lists and dicts ('a', not a).
std::string Repr(const Value& v);
// Python's ==.
bool Equal(const Value& a, const Value& b);
// Python's < for numbers and for strings; InvalidArgument for other pairs.
absl::StatusOr<bool> Less(const Value& a, const Value& b);
// json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: one line, ", "
// and ": ").
std::string ToJson(const Value& v, int indent = -1, int depth = 0);
// "undefined", "none", "boolean", "integer", "float", "string", "list", "dict".
const char* KindName(const Value& v);

}  // namespace lrkv::jinja

#endif  // LRKV_TOKENIZER_JINJA_VALUE_H_
