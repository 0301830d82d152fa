#include "tokenizer/jinja_value.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace lrkv::jinja {

Value Value::Get(const std::string& key) const {
  if (kind != Kind::kDict) return Value();
  for (const auto& [k, v] : *dict) {
    if (k == key) return v;
  }
  return Value();
}

void Value::Set(const std::string& key, Value v) const {
  for (auto& [k, old] : *dict) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict->emplace_back(key, std::move(v));
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return !v.dict->empty();
  }
  return false;
}

namespace {

// Python's repr of a float: the shortest text that reads back, with ".0" on
// integers.
std::string FloatText(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string QuoteJson(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string Repr(const Value& v) {
  if (v.kind != Value::Kind::kString) return ToText(v);
  const char quote =
      v.s.find('\'') != std::string::npos && v.s.find('"') == std::string::npos
          ? '"'
          : '\'';
  std::string out(1, quote);
  for (char c : v.s) {
    if (c == '\\' || c == quote) out += '\\';
    if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + quote;
}

std::string ToText(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return absl::StrCat(v.i);
    case Value::Kind::kFloat:
      return FloatText(v.f);
    case Value::Kind::kString:
      return v.s;
    case Value::Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        absl::StrAppend(&out, k ? ", " : "", Repr((*v.list)[k]));
      }
      return out + "]";
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      for (size_t k = 0; k < v.dict->size(); ++k) {
        absl::StrAppend(&out, k ? ", " : "",
                        Repr(Value::Str((*v.dict)[k].first)), ": ",
                        Repr((*v.dict)[k].second));
      }
      return out + "}";
    }
  }
  return "";
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.number() == b.number();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!Equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        if (!Equal(v, b.Get(k))) return false;
      }
      return true;
    default:
      return true;  // undefined == undefined, none == none
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.number() < b.number();
  if (a.kind == Value::Kind::kString && b.kind == Value::Kind::kString)
    return a.s < b.s;
  return absl::InvalidArgumentError(
      absl::StrCat("cannot order a ", KindName(a), " and a ", KindName(b)));
}

std::string ToJson(const Value& v, int indent, int depth) {
  const std::string pad =
      indent >= 0 ? "\n" + std::string((depth + 1) * indent, ' ') : "";
  const std::string end =
      indent >= 0 ? "\n" + std::string(depth * indent, ' ') : "";
  const char* comma = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
      return v.b ? "true" : "false";
    case Value::Kind::kInt:
      return absl::StrCat(v.i);
    case Value::Kind::kFloat:
      return FloatText(v.f);
    case Value::Kind::kString:
      return QuoteJson(v.s);
    case Value::Kind::kList: {
      if (v.list->empty()) return "[]";
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        absl::StrAppend(&out, k ? comma : "", pad,
                        ToJson((*v.list)[k], indent, depth + 1));
      }
      return out + end + "]";
    }
    case Value::Kind::kDict: {
      if (v.dict->empty()) return "{}";
      std::string out = "{";
      for (size_t k = 0; k < v.dict->size(); ++k) {
        absl::StrAppend(&out, k ? comma : "", pad,
                        QuoteJson((*v.dict)[k].first), ": ",
                        ToJson((*v.dict)[k].second, indent, depth + 1));
      }
      return out + end + "}";
    }
  }
  return "null";
}

const char* KindName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "undefined";
    case Value::Kind::kNone:
      return "none";
    case Value::Kind::kBool:
      return "boolean";
    case Value::Kind::kInt:
      return "integer";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "string";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
  }
  return "?";
}

}  // namespace lrkv::jinja
