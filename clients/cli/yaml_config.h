// `-f FILE` for the commands that take many options (compare, pipeline,
// convert, verify, heal; any command): a YAML mapping of option names to
// values, as mergekit and lm-eval users write them. Flags given on the command
// line override the file. Keys are the long option names with '-' or '_'; a
// list becomes a comma list, a mapping (a pipeline stage) the JSON object that
// option takes. The file's text is kept (ConfigFileRecord) and stored with the
// job or in the report's provenance.
#ifndef LRKV_CLIENTS_CLI_YAML_CONFIG_H_
#define LRKV_CLIENTS_CLI_YAML_CONFIG_H_

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"

namespace lrkv::cli {

// Adds -f/--file FILE to the root app, read as YAML and applied to the
// subcommand the command line selects (before or after it: `lrkv compare -f
// study.yaml`). Call before adding subcommands.
void AddConfigFileOption(CLI::App& root);

// {"name": FILE, "text": its contents} when a command read one, else null.
nlohmann::json ConfigFileRecord();

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_YAML_CONFIG_H_
