// The non-template half of option schemas (see option_schema.h).
#include "base/option_schema.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lrkv {
namespace {

using nlohmann::json;

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// A value as a message quotes it: short, one line.
std::string Shown(const json& value) {
  std::string shown =
      value.is_string() ? value.get<std::string>() : value.dump();
  if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
  return shown;
}

bool HasElementType(const json& v, OptionType type) {
  switch (type) {
    case OptionType::kFlag:
      return v.is_boolean();
    case OptionType::kInteger:
    case OptionType::kIntegerList:
      return v.is_number_integer();
    case OptionType::kNumber:
    case OptionType::kNumberList:
      return v.is_number();
    case OptionType::kString:
    case OptionType::kStringList:
      return v.is_string();
    case OptionType::kBytes:
      return v.is_number_unsigned() ||
             (v.is_number_integer() && v.get<int64_t>() >= 0) ||
             (v.is_string() && ParseByteSize(v.get<std::string>()).ok());
  }
  return false;
}

// A bound as a message writes it: 1048576, not 1.04858e+06.
std::string BoundText(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e18) {
    return absl::StrCat(static_cast<int64_t>(x));
  }
  return absl::StrCat(x);
}

// "must lie in [1, 4096]", "must be at least 0", "must be more than 0".
std::string RangeText(std::optional<double> min, bool min_open,
                      std::optional<double> max) {
  if (!max) {
    return absl::StrCat("must be ", min_open ? "more than " : "at least ",
                        BoundText(*min));
  }
  if (!min) return absl::StrCat("must be at most ", BoundText(*max));
  return absl::StrCat("must lie in ", min_open ? "(" : "[", BoundText(*min),
                      ", ", BoundText(*max), "]");
}

// Whether x lies outside [min, max] (or (min, max]).
bool Outside(double x, std::optional<double> min, bool min_open,
             std::optional<double> max) {
  const bool below = min && (min_open ? !(x > *min) : !(x >= *min));
  return below || (max && !(x <= *max)) || std::isnan(x);
}

// One element against the range and the choices.
absl::Status CheckElement(const OptionInfo& info, const json& v,
                          OptionSource source) {
  const std::string name = OptionDisplayName(info.name, source);
  if (v.is_number()) {
    const double x = v.get<double>();
    if ((info.min || info.max) &&
        Outside(x, info.min, info.min_open, info.max)) {
      return Invalid(
          absl::StrCat(name, " ", Shown(v), " ",
                       RangeText(info.min, info.min_open, info.max)));
    }
    if (Outside(x, info.limit_min, false, info.limit_max)) {
      return Invalid(
          absl::StrCat(name, " ", Shown(v), " ",
                       RangeText(info.limit_min, false, info.limit_max)));
    }
  }
  if (v.is_string() && !info.choices.empty()) {
    for (const auto& c : info.choices) {
      const std::string& given = v.get<std::string>();
      if (info.choices_ignore_case ? absl::EqualsIgnoreCase(c, given)
                                   : c == given) {
        return absl::OkStatus();
      }
    }
    return Invalid(absl::StrCat(name, " '", Shown(v), "' must be one of ",
                                absl::StrJoin(info.choices, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsListType(OptionType type) {
  return type == OptionType::kIntegerList || type == OptionType::kNumberList ||
         type == OptionType::kStringList;
}

std::string OptionFlagName(const std::string& name) {
  std::string flag = name;
  for (char& c : flag) {
    if (c == '_') c = '-';
  }
  return flag;
}

std::string OptionName(const std::string& name, OptionSource source) {
  return source == OptionSource::kCommandLine ? "--" + OptionFlagName(name)
                                              : absl::StrCat("'", name, "'");
}

std::string OptionDisplayName(const std::string& name, OptionSource source) {
  return source == OptionSource::kCommandLine
             ? "--" + OptionFlagName(name)
             : absl::StrCat("params_json: '", name, "'");
}

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (!s.empty() && s.back() == 'b') s.pop_back();
  double unit = 1;
  if (!s.empty() && s.back() == 'i') {
    s.pop_back();
    const std::string prefixes = "kmgt";
    const size_t p = s.empty() ? std::string::npos : prefixes.find(s.back());
    if (p == std::string::npos)
      return Invalid(absl::StrCat("size '", text, "' has no unit"));
    unit = std::pow(1024.0, static_cast<double>(p + 1));
    s.pop_back();
  } else if (!s.empty()) {
    const std::string prefixes = "kmgt";
    if (const size_t p = prefixes.find(s.back()); p != std::string::npos) {
      unit = std::pow(1000.0, static_cast<double>(p + 1));
      s.pop_back();
    }
  }
  double x = 0;
  if (s.empty() || !absl::SimpleAtod(s, &x) || !(x >= 0) ||
      !(x * unit < 1.8e19)) {
    return Invalid(absl::StrCat(
        "size '", text,
        "' must be bytes or a number with a unit (5GB, 500MB, 2GiB)"));
  }
  return static_cast<uint64_t>(std::llround(x * unit));
}

absl::Status OptionInfo::Check(const json& value, OptionSource source) const {
  const std::string shown_name = OptionDisplayName(name, source);
  const bool list = IsListType(type);
  if (list != value.is_array() || (!list && !HasElementType(value, type))) {
    return Invalid(
        absl::StrCat(shown_name, " has the wrong type (", Shown(value), ")"));
  }
  if (!list) return CheckElement(*this, value, source);
  if (non_empty && value.empty())
    return Invalid(absl::StrCat(shown_name, " lists nothing"));
  for (const json& e : value) {
    if (!HasElementType(e, type)) {
      return Invalid(
          absl::StrCat(shown_name, " has the wrong type (", Shown(value), ")"));
    }
    if (absl::Status st = CheckElement(*this, e, source); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status UnknownOptionError(const std::string& command,
                                const std::string& name, bool local_only,
                                const std::vector<OptionInfo>& infos,
                                OptionSource source) {
  const std::string shown = OptionDisplayName(name, source);
  if (local_only) {
    return Invalid(absl::StrCat(shown, " applies to a local `lrkv ", command,
                                "` only, not to a job on lrkvd"));
  }
  std::vector<std::string> valid;
  for (const OptionInfo& info : infos) {
    if (source == OptionSource::kCommandLine ||
        info.scope == OptionScope::kEverywhere) {
      valid.push_back(info.name);
    }
  }
  return Invalid(
      absl::StrCat(source == OptionSource::kParamsJson ? "params_json: " : "",
                   "unknown parameter '", name, "' of ", command,
                   "; valid: ", absl::StrJoin(valid, ", ")));
}

absl::Status MissingOptionError(const std::string& command,
                                const OptionInfo& info, OptionSource source) {
  return Invalid(absl::StrCat(OptionDisplayName(info.name, source),
                              " is required by ", command, " (", info.help,
                              ")"));
}

}  // namespace lrkv
