// Flags from option schemas (see schema_flags.h).
#include "clients/cli/schema_flags.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace lrkv::cli {
namespace {

// "--rope-mode,--rope-modes" (and ",!--no-keep-best" for a flag that defaults
// to on).
std::string FlagNames(const OptionInfo& info) {
  if (info.positional) return info.name;
  std::string names = "--" + OptionFlagName(info.name);
  if (info.short_name != 0)
    names = std::string("-") + info.short_name + "," + names;
  for (const auto& alias : info.aliases) names += ",--" + OptionFlagName(alias);
  // A flag on by default, or unset (auto) until given, can be turned off.
  if (info.type == OptionType::kFlag &&
      (info.default_value == true || info.default_value.is_null())) {
    names += ",!--no-" + OptionFlagName(info.name);
  }
  return names;
}

// The default as --help shows it: "0.25,0.5,0.75", "reconstruct", "5GB".
std::string DefaultText(const nlohmann::json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::vector<std::string> parts;
    for (const auto& e : value) parts.push_back(DefaultText(e));
    return absl::StrJoin(parts, ",");
  }
  return value.dump();
}

// 1048576, 0.5: a bound as --help shows it.
std::string Bound(double x) {
  if (x == static_cast<double>(static_cast<int64_t>(x))) {
    return absl::StrCat(static_cast<int64_t>(x));
  }
  return absl::StrCat(x);
}

// "[1, 256]", ">= 0", "(0, 1]": the range --help shows.
std::string RangeText(const OptionInfo& info) {
  if (info.min && info.max) {
    return absl::StrCat(info.min_open ? "(" : "[", Bound(*info.min), ", ",
                        Bound(*info.max), "]");
  }
  if (info.min) {
    return absl::StrCat(info.min_open ? "> " : ">= ", Bound(*info.min));
  }
  return absl::StrCat("<= ", Bound(*info.max));
}

// What --help shows for the value: "lrkv|gqa|mqa|mla", "INT", "NUMBER,...",
// "SIZE".
std::string TypeName(const OptionInfo& info) {
  std::string element;
  if (!info.choices.empty()) {
    element = absl::StrJoin(info.choices, "|");
  } else {
    switch (info.type) {
      case OptionType::kInteger:
      case OptionType::kIntegerList:
        element = "INT";
        break;
      case OptionType::kNumber:
      case OptionType::kNumberList:
        element = "NUMBER";
        break;
      case OptionType::kBytes:
        element = "SIZE";
        break;
      default:
        element = info.role == OptionRole::kValue ? "TEXT" : "PATH";
    }
  }
  if (info.min || info.max) element += ":" + RangeText(info);
  return IsListType(info.type) ? element + ",..." : element;
}

OptionType ElementType(OptionType type) {
  switch (type) {
    case OptionType::kIntegerList:
      return OptionType::kInteger;
    case OptionType::kNumberList:
      return OptionType::kNumber;
    case OptionType::kStringList:
      return OptionType::kString;
    default:
      return type;
  }
}

std::vector<const SchemaFlags*>& Registry() {
  static auto* flags = new std::vector<const SchemaFlags*>();
  return *flags;
}

}  // namespace

bool OwnedBySchema(const CLI::Option* option) {
  for (const SchemaFlags* flags : Registry()) {
    if (flags->Owns(option)) return true;
  }
  return false;
}

SchemaFlags::~SchemaFlags() {
  auto& all = Registry();
  all.erase(std::remove(all.begin(), all.end(), this), all.end());
}

nlohmann::json FlagValue(const std::string& text, OptionType type) {
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  switch (ElementType(type)) {
    case OptionType::kInteger:
    case OptionType::kBytes:
      if (absl::SimpleAtoi(text, &i)) return i;
      if (absl::SimpleAtoi(text, &u)) return u;
      return text;
    case OptionType::kNumber:
      if (absl::SimpleAtoi(text, &i)) return i;
      if (absl::SimpleAtod(text, &d)) return d;
      return text;
    case OptionType::kFlag:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0" || text == "-1") return false;
      return text;
    default:
      return text;
  }
}

SchemaFlags::SchemaFlags(CLI::App* cmd, std::string command,
                         std::vector<OptionInfo> infos)
    : command_(std::move(command)) {
  Registry().push_back(this);
  for (OptionInfo& info : infos) {
    Flag flag;
    const std::string help = info.scope == OptionScope::kLocalOnly
                                 ? info.help + " (a local run only)"
                                 : info.help;
    if (info.type == OptionType::kFlag) {
      flag.option = cmd->add_flag(FlagNames(info), help);
    } else {
      flag.option = cmd->add_option(FlagNames(info), help);
      flag.option->type_size(1);
      flag.option->multi_option_policy(IsListType(info.type)
                                           ? CLI::MultiOptionPolicy::TakeAll
                                           : CLI::MultiOptionPolicy::TakeLast);
      flag.option->type_name(TypeName(info));
      // A sentinel default the option cannot be given (-1: from --budget) is
      // not shown; the help says what it means.
      if (const std::string d = DefaultText(info.default_value);
          !d.empty() &&
          info.Check(info.default_value, OptionSource::kCommandLine).ok()) {
        flag.option->default_str(d);
      }
    }
    if (info.required) flag.option->required();
    if (!info.group.empty()) flag.option->group(info.group);
    flag.info = std::move(info);
    flags_.push_back(std::move(flag));
  }
}

nlohmann::json SchemaFlags::Given() const {
  nlohmann::json given = nlohmann::json::object();
  for (const Flag& flag : flags_) {
    if (flag.option->count() == 0) continue;
    const OptionInfo& info = flag.info;
    if (info.type == OptionType::kFlag) {
      given[info.name] = flag.option->as<bool>();
    } else if (IsListType(info.type)) {
      nlohmann::json list = nlohmann::json::array();
      for (const std::string& r : flag.option->results()) {
        for (absl::string_view part :
             absl::StrSplit(r, ',', absl::SkipEmpty())) {
          list.push_back(FlagValue(std::string(part), info.type));
        }
      }
      given[info.name] = list;
    } else {
      given[info.name] = FlagValue(flag.option->results().back(), info.type);
    }
  }
  return given;
}

std::vector<const OptionInfo*> SchemaFlags::GivenInfos() const {
  std::vector<const OptionInfo*> out;
  for (const Flag& flag : flags_) {
    if (flag.option->count() > 0) out.push_back(&flag.info);
  }
  return out;
}

bool SchemaFlags::Owns(const CLI::Option* option) const {
  for (const Flag& flag : flags_) {
    if (flag.option == option) return true;
  }
  return false;
}

}  // namespace lrkv::cli
