// One declaration per option of a command or job: its name, type, default,
// help, valid range or choices, and whether it applies to a job or to a local
// run only. The CLI's flags (clients/cli/schema_flags.h), the YAML -f keys (the
// flags' names) and a job's params_json keys (service/job_params.cc) are all
// generated from it, and every value, from either side, goes through the same
// Parse: `lrkv X` and lrkvd's X job accept the same names and refuse the same
// values (tests/clients/option_schema_test.cc).
//
// An option named "heal_lr" is the params_json and YAML key heal_lr and the
// flag
// --heal-lr. Values are JSON: the CLI turns a flag's text into the value the
// option's type takes (an integer, a number, true, a list split on commas)
// before Parse sees it, so "--rank 2.7" and {"rank": 2.7} are refused by the
// same check.
#ifndef LRKV_BASE_OPTION_SCHEMA_H_
#define LRKV_BASE_OPTION_SCHEMA_H_

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "nlohmann/json.hpp"

namespace lrkv {

enum class OptionType {
  kFlag,     // true / false (a CLI flag without a value)
  kInteger,  // a JSON integer
  kNumber,   // a JSON number
  kString,   // a JSON string
  kBytes,    // a byte count: an integer, or a string such as "5GB", "500MB",
             // "2GiB"
  kIntegerList,  // lists: JSON arrays; on the command line comma lists or
                 // repeated flags
  kNumberList,
  kStringList,
};
bool IsListType(OptionType type);

// What the value names, for a client submitting a job: kPath, a file the server
// reads (sent as an absolute path); kCheckpoint, another checkpoint (sent as
// its server id).
enum class OptionRole { kValue, kPath, kCheckpoint };

// Where an option applies: everywhere (a local run and a job), or a local run
// only (processes, devices and files of this machine); a job refuses those by
// name.
enum class OptionScope { kEverywhere, kLocalOnly };

// Where a value came from, so that a message names the option as the user wrote
// it.
enum class OptionSource { kCommandLine, kParamsJson };

// "--heal-lr" (the command line, YAML files included) or "params_json:
// 'heal_lr'".
std::string OptionDisplayName(const std::string& name, OptionSource source);
// "heal-lr".
std::string OptionFlagName(const std::string& name);
// "--heal-lr" or "'heal_lr'": an option named inside a message (a check across
// options).
std::string OptionName(const std::string& name, OptionSource source);

// Parses "5GB", "500MB", "2GiB", "1.5k", "123" (k/M/G/T are powers of 1000,
// Ki/Mi/Gi/Ti of 1024, a trailing B optional); InvalidArgument otherwise.
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text);

// The declaration of one option, without the options struct it fills.
struct OptionInfo {
  /// snake_case: the params_json and YAML key; the flag is --kebab-case.
  std::string name;
  OptionType type = OptionType::kString;
  /// One line for --help and the docs.
  std::string help;
  OptionRole role = OptionRole::kValue;
  OptionScope scope = OptionScope::kEverywhere;
  /// Refused when absent.
  bool required = false;
  /// Other names taken for it everywhere (older params_json keys).
  std::vector<std::string> aliases;
  /// Numbers (each element of a list): the valid range; `min_open` excludes min
  /// itself.
  std::optional<double> min, max;
  bool min_open = false;
  /// Integers: what the member can hold (-1 is not wrapped into an unsigned
  /// seed).
  std::optional<double> limit_min, limit_max;
  /// Strings (each element of a list): the values taken; empty: any.
  std::vector<std::string> choices;
  /// The choices are names of an enum, matched in any case ("LRKV" is lrkv).
  bool choices_ignore_case = false;
  /// Lists: at least one element.
  bool non_empty = false;
  /// The default as its JSON value (null: none); shown by --help.
  nlohmann::json default_value;
  /// The command line only: a one-letter name besides the long one ('v' for
  /// -v), a positional argument (`lrkv jobs get JOB`) instead of a flag, and
  /// the --help section it is listed under (empty: "Options").
  char short_name = 0;
  bool positional = false;
  std::string group;

  // InvalidArgument naming the option when `value` is not of its type, range or
  // choices.
  absl::Status Check(const nlohmann::json& value, OptionSource source) const;
};

// The value type of an option's member: T itself, or T of a std::optional<T>.
template <typename T>
struct OptionalValue {
  using type = T;
  static constexpr bool kOptional = false;
};
template <typename T>
struct OptionalValue<std::optional<T>> {
  using type = T;
  static constexpr bool kOptional = true;
};

// T, without deducing a template argument from it (std::type_identity_t before
// C++20).
template <typename T>
struct NotDeducedType {
  using type = T;
};
template <typename T>
using NotDeduced = typename NotDeducedType<T>::type;

// One option of the options struct `Options`: its declaration and how its value
// is stored.
template <typename Options>
struct OptionSpec {
  OptionInfo info;
  // Stores a value that passed info.Check (converting names to enums, ranges,
  // sizes).
  std::function<absl::Status(const nlohmann::json& value, Options& options,
                             OptionSource source)>
      store;

  OptionSpec& Range(double lo, double hi) {
    info.min = lo;
    info.max = hi;
    return *this;
  }
  OptionSpec& Min(double lo) {
    info.min = lo;
    return *this;
  }
  // Greater than lo, at most hi.
  OptionSpec& Above(double lo, double hi) {
    info.min = lo;
    info.min_open = true;
    info.max = hi;
    return *this;
  }
  OptionSpec& Choices(std::vector<std::string> choices) {
    info.choices = std::move(choices);
    return *this;
  }
  OptionSpec& Required() {
    info.required = true;
    return *this;
  }
  OptionSpec& NonEmpty() {
    info.non_empty = true;
    return *this;
  }
  OptionSpec& Path() {
    info.role = OptionRole::kPath;
    return *this;
  }
  OptionSpec& Checkpoint() {
    info.role = OptionRole::kCheckpoint;
    return *this;
  }
  OptionSpec& LocalOnly() {
    info.scope = OptionScope::kLocalOnly;
    return *this;
  }
  OptionSpec& Alias(std::string name) {
    info.aliases.push_back(std::move(name));
    return *this;
  }
  OptionSpec& Short(char name) {
    info.short_name = name;
    return *this;
  }
  OptionSpec& Positional() {
    info.positional = true;
    return *this;
  }
  OptionSpec& Group(std::string name) {
    info.group = std::move(name);
    return *this;
  }
};

// The messages of OptionSchema::Parse (non-template).
absl::Status UnknownOptionError(const std::string& command,
                                const std::string& name, bool local_only,
                                const std::vector<OptionInfo>& infos,
                                OptionSource source);
absl::Status MissingOptionError(const std::string& command,
                                const OptionInfo& info, OptionSource source);

// Every option of a command or job kind, and the checks that span several.
template <typename Options>
class OptionSchema {
 public:
  // `command`: "convert", "heal", ... (messages and docs).
  explicit OptionSchema(std::string command) : command_(std::move(command)) {}

  // An option stored as it is: bool, an integer, double, std::string or a
  // vector of them. `field` returns the member: [](Options& o) -> auto& {
  // return o.x.y; }.
  // A std::optional member is unset (null) by default and set when given.
  template <typename Field>
  OptionSpec<Options>& Value(std::string name, Field field, std::string help) {
    using Member =
        std::remove_reference_t<std::invoke_result_t<Field, Options&>>;
    using T = typename OptionalValue<Member>::type;
    OptionSpec<Options>& spec =
        Add(std::move(name), TypeOf<T>(), std::move(help));
    if constexpr (!OptionalValue<Member>::kOptional) {
      spec.info.default_value = DefaultOf(field);
    }
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      spec.info.limit_min = static_cast<double>(std::numeric_limits<T>::min());
      spec.info.limit_max = static_cast<double>(std::numeric_limits<T>::max());
    }
    std::string name_copy = spec.info.name;
    spec.store = [field, name_copy](const nlohmann::json& v, Options& o,
                                    OptionSource source) {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        // The limits above are doubles: near 2^63 only an exact comparison
        // tells.
        if (v.is_number_unsigned() &&
            v.get<uint64_t>() >
                static_cast<uint64_t>(std::numeric_limits<T>::max())) {
          return absl::InvalidArgumentError(
              OptionDisplayName(name_copy, source) + " " + v.dump() +
              " is too large");
        }
      }
      field(o) = v.get<T>();
      return absl::OkStatus();
    };
    return spec;
  }

  // A byte count (uint64_t or int64_t member) given as bytes or with a unit.
  template <typename Field>
  OptionSpec<Options>& Bytes(std::string name, Field field, std::string help,
                             std::string default_text) {
    using T = std::remove_reference_t<std::invoke_result_t<Field, Options&>>;
    OptionSpec<Options>& spec =
        Add(std::move(name), OptionType::kBytes, std::move(help));
    spec.info.default_value = std::move(default_text);
    spec.store = [field](const nlohmann::json& v, Options& o, OptionSource) {
      field(o) =
          static_cast<T>(v.is_string() ? *ParseByteSize(v.get<std::string>())
                                       : v.get<uint64_t>());
      return absl::OkStatus();
    };
    return spec;
  }

  // A member of type T (an enum) given by name: `values` are the T it takes,
  // `name_of` names each.
  template <typename Field, typename NameOf,
            typename T =
                std::remove_reference_t<std::invoke_result_t<Field, Options&>>>
  OptionSpec<Options>& Choice(std::string name, Field field,
                              std::vector<T> values, NameOf name_of,
                              std::string help) {
    OptionSpec<Options>& spec =
        Add(std::move(name), OptionType::kString, std::move(help));
    Options defaults{};
    spec.info.choices_ignore_case = true;
    std::vector<std::pair<T, std::string>> named;
    for (const T& value : values) {
      named.emplace_back(value, name_of(value));
      spec.info.choices.push_back(named.back().second);
      if (value == field(defaults))
        spec.info.default_value = named.back().second;
    }
    spec.store = [field, named](const nlohmann::json& v, Options& o,
                                OptionSource) {
      for (const auto& [value, text] : named) {
        if (absl::EqualsIgnoreCase(text, v.get<std::string>()))
          field(o) = value;
      }
      return absl::OkStatus();
    };
    return spec;
  }

  // A list of T (an enum) given by names (a comma list on the command line, a
  // JSON array in params_json), as Choice names each.
  template <typename Field, typename NameOf,
            typename List =
                std::remove_reference_t<std::invoke_result_t<Field, Options&>>,
            typename T = typename List::value_type>
  OptionSpec<Options>& ChoiceList(std::string name, Field field,
                                  std::vector<T> values, NameOf name_of,
                                  std::string help) {
    OptionSpec<Options>& spec =
        Add(std::move(name), OptionType::kStringList, std::move(help));
    Options defaults{};
    spec.info.choices_ignore_case = true;
    std::vector<std::pair<T, std::string>> named;
    for (const T& value : values) {
      named.emplace_back(value, name_of(value));
      spec.info.choices.push_back(named.back().second);
    }
    nlohmann::json default_names = nlohmann::json::array();
    for (const T& value : field(defaults))
      default_names.push_back(name_of(value));
    spec.info.default_value = default_names;
    spec.store = [field, named](const nlohmann::json& v, Options& o,
                                OptionSource) {
      List list;
      for (const auto& element : v) {
        for (const auto& [value, text] : named) {
          if (absl::EqualsIgnoreCase(text, element.get<std::string>()))
            list.push_back(value);
        }
      }
      field(o) = std::move(list);
      return absl::OkStatus();
    };
    return spec;
  }

  // A member of type T given as a string that `parse` reads (InvalidArgument
  // otherwise) and `format` writes (for the default).
  template <typename Field, typename T = std::remove_reference_t<
                                std::invoke_result_t<Field, Options&>>>
  OptionSpec<Options>& Parsed(
      std::string name, Field field,
      NotDeduced<std::function<absl::StatusOr<T>(const std::string&)>> parse,
      NotDeduced<std::function<std::string(const T&)>> format,
      std::string help) {
    OptionSpec<Options>& spec =
        Add(std::move(name), OptionType::kString, std::move(help));
    Options defaults{};
    spec.info.default_value = format(field(defaults));
    spec.store = [field, parse](const nlohmann::json& v, Options& o,
                                OptionSource source) {
      absl::StatusOr<T> parsed = parse(v.get<std::string>());
      if (!parsed.ok()) return Prefixed(parsed.status(), source);
      field(o) = *std::move(parsed);
      return absl::OkStatus();
    };
    return spec;
  }

  // A check spanning options, run after every given value is stored; messages
  // name options with OptionDisplayName(name, source).
  void Check(std::function<absl::Status(const Options&, OptionSource)> check) {
    checks_.push_back(std::move(check));
  }

  // `base` with the options of `params` (a JSON object) stored: InvalidArgument
  // for a name the schema lacks (or, from params_json, a local-only one), a
  // value of the wrong type, range or choices, a required option missing, or a
  // failed check.
  absl::StatusOr<Options> Parse(const nlohmann::json& params, Options base,
                                OptionSource source) const {
    if (!params.is_object()) {
      return absl::InvalidArgumentError(
          command_ + ": the parameters must be a JSON object");
    }
    for (auto it = params.begin(); it != params.end(); ++it) {
      const OptionSpec<Options>* spec = Find(it.key());
      if (spec == nullptr || (source == OptionSource::kParamsJson &&
                              spec->info.scope == OptionScope::kLocalOnly)) {
        return UnknownOptionError(command_, it.key(), spec != nullptr, Infos(),
                                  source);
      }
    }
    for (const OptionSpec<Options>& spec : specs_) {
      const nlohmann::json* value = Given(params, spec.info);
      if (value == nullptr) {
        if (spec.info.required)
          return MissingOptionError(command_, spec.info, source);
        continue;
      }
      if (absl::Status st = spec.info.Check(*value, source); !st.ok())
        return st;
      if (absl::Status st = spec.store(*value, base, source); !st.ok())
        return st;
    }
    for (const auto& check : checks_) {
      if (absl::Status st = check(base, source); !st.ok())
        return Prefixed(st, source);
    }
    return base;
  }

  const std::string& command() const { return command_; }
  // Every option's declaration, in declaration order.
  std::vector<OptionInfo> Infos() const {
    std::vector<OptionInfo> out;
    for (const auto& spec : specs_) out.push_back(spec.info);
    return out;
  }

 private:
  OptionSpec<Options>& Add(std::string name, OptionType type,
                           std::string help) {
    specs_.push_back({});
    specs_.back().info.name = std::move(name);
    specs_.back().info.type = type;
    specs_.back().info.help = std::move(help);
    return specs_.back();
  }

  template <typename T>
  static constexpr OptionType TypeOf() {
    if constexpr (std::is_same_v<T, bool>) {
      return OptionType::kFlag;
    } else if constexpr (std::is_integral_v<T>) {
      return OptionType::kInteger;
    } else if constexpr (std::is_floating_point_v<T>) {
      return OptionType::kNumber;
    } else if constexpr (std::is_same_v<T, std::string>) {
      return OptionType::kString;
    } else if constexpr (std::is_integral_v<typename T::value_type>) {
      return OptionType::kIntegerList;
    } else if constexpr (std::is_floating_point_v<typename T::value_type>) {
      return OptionType::kNumberList;
    } else {
      static_assert(std::is_same_v<typename T::value_type, std::string>);
      return OptionType::kStringList;
    }
  }

  template <typename Field>
  static nlohmann::json DefaultOf(Field field) {
    Options defaults{};
    return nlohmann::json(field(defaults));
  }

  const OptionSpec<Options>* Find(const std::string& name) const {
    for (const auto& spec : specs_) {
      if (spec.info.name == name) return &spec;
      for (const auto& alias : spec.info.aliases) {
        if (alias == name) return &spec;
      }
    }
    return nullptr;
  }

  static const nlohmann::json* Given(const nlohmann::json& params,
                                     const OptionInfo& info) {
    if (auto it = params.find(info.name); it != params.end()) return &*it;
    for (const auto& alias : info.aliases) {
      if (auto it = params.find(alias); it != params.end()) return &*it;
    }
    return nullptr;
  }

  // A parser's own message, said to come from params_json where it did.
  static absl::Status Prefixed(const absl::Status& st, OptionSource source) {
    return source == OptionSource::kParamsJson
               ? absl::InvalidArgumentError("params_json: " +
                                            std::string(st.message()))
               : st;
  }

  std::string command_;
  std::vector<OptionSpec<Options>> specs_;
  std::vector<std::function<absl::Status(const Options&, OptionSource)>>
      checks_;
};

}  // namespace lrkv

#endif  // LRKV_BASE_OPTION_SCHEMA_H_
