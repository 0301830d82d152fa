// A command's flags generated from an option schema (base/option_schema.h): one
// flag per option (--kebab-case of its name, its aliases too), its help and
// default, required where the schema says; YAML -f keys reach them by the same
// names. Given() is what the command line (and its -f file) set, as the JSON
// values the schema parses, so a local run parses exactly what RemoteJob
// submits to lrkvd.
#ifndef LRKV_CLIENTS_CLI_SCHEMA_FLAGS_H_
#define LRKV_CLIENTS_CLI_SCHEMA_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "base/option_schema.h"
#include "clients/cli/commands.h"
#include "nlohmann/json.hpp"

namespace lrkv::cli {

class SchemaFlags {
 public:
  // Adds a flag per option of `infos` to `cmd` (kept alive by `cmd`'s owner).
  SchemaFlags(CLI::App* cmd, std::string command,
              std::vector<OptionInfo> infos);
  ~SchemaFlags();
  SchemaFlags(const SchemaFlags&) = delete;
  SchemaFlags& operator=(const SchemaFlags&) = delete;

  // The options given, as a JSON object of their values: integers and numbers
  // where the text reads as one (else the text, which the schema refuses as the
  // wrong type), true or false for flags, lists split on commas and over
  // repeated flags.
  nlohmann::json Given() const;
  // The given options' declarations, in declaration order.
  std::vector<const OptionInfo*> GivenInfos() const;
  // Whether `option` is one of these flags.
  bool Owns(const CLI::Option* option) const;
  const std::string& command() const { return command_; }

 private:
  struct Flag {
    OptionInfo info;
    CLI::Option* option = nullptr;
  };
  std::string command_;
  std::vector<Flag> flags_;
};

template <typename Options>
std::shared_ptr<SchemaFlags> AddSchemaFlags(
    CLI::App* cmd, const OptionSchema<Options>& schema) {
  return std::make_shared<SchemaFlags>(cmd, schema.command(), schema.Infos());
}

// `base` with the given flags stored by `schema` (InvalidArgument naming the
// flag).
template <typename Options>
absl::StatusOr<Options> ParseFlags(const SchemaFlags& flags,
                                   const OptionSchema<Options>& schema,
                                   Options base) {
  return schema.Parse(flags.Given(), std::move(base),
                      OptionSource::kCommandLine);
}

// Whether `option` is a flag some live SchemaFlags made (the test that every
// command's flags come from a schema, `lrkv options`).
bool OwnedBySchema(const CLI::Option* option);

// Adds `schema`'s flags to `cmd` and makes its callback run(options): the
// options parsed from them (a usage error naming the flag, exit 2, otherwise);
// run returns the exit code, stored in *exit_code. For the commands that are
// not jobs; `schema` must outlive the app (a function-local static).
template <typename Options, typename Run>
std::shared_ptr<SchemaFlags> AddSchemaCommand(
    CLI::App* cmd, const OptionSchema<Options>& schema, int* exit_code,
    Run run) {
  auto flags = AddSchemaFlags(cmd, schema);
  cmd->callback([flags, &schema, exit_code, run] {
    absl::StatusOr<Options> options = ParseFlags(*flags, schema, Options{});
    *exit_code =
        options.ok() ? run(*std::move(options)) : Fail(options.status());
  });
  return flags;
}

// One flag's text as the JSON value of `type`'s elements.
nlohmann::json FlagValue(const std::string& text, OptionType type);

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_SCHEMA_FLAGS_H_
