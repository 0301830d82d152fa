// `lrkv options` (hidden): every command's options and where each was
// declared, for the test that every flag comes from an option schema
// (tests/clients/cli_options_test.py) and for docs.
#include <iostream>
#include <string>

#include "clients/cli/commands.h"
#include "clients/cli/renamed_options.h"
#include "clients/cli/schema_flags.h"
#include "nlohmann/json.hpp"

namespace lrkv::cli {
namespace {

// "schema", "renamed" (an old spelling, refused), "builtin" (--help, --version,
// -f) or "hand" (none of these: the test fails on it).
std::string Origin(const CLI::App& app, const CLI::Option* o) {
  if (OwnedBySchema(o)) return "schema";
  if (RenamedOptions().count(o)) return "renamed";
  if (o == app.get_help_ptr() || o == app.get_help_all_ptr() ||
      o == app.get_version_ptr() || o == app.get_config_ptr()) {
    return "builtin";
  }
  return "hand";
}

void List(const CLI::App& app, const std::string& path, nlohmann::json* out) {
  for (const CLI::Option* o : app.get_options()) {
    (*out).push_back(
        {{"command", path.empty() ? "lrkv" : path},
         {"option", o->get_name()},
         {"positional", o->get_lnames().empty() && o->get_snames().empty()},
         {"origin", Origin(app, o)}});
  }
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_group().empty()) continue;  // hidden: this one
    List(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(),
         out);
  }
}

}  // namespace

void AddOptionsCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "options", "Every command's options and where each is declared (JSON)");
  cmd->group("");
  cmd->callback([&app, exit_code] {
    nlohmann::json out = nlohmann::json::array();
    List(app, "", &out);
    std::cout << out.dump(1) << "\n";
    *exit_code = kExitOk;
  });
}

}  // namespace lrkv::cli
