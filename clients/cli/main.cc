// `lrkv`: the command-line front end. Commands parse arguments and call the
// core library; errors print one line naming the file and the problem, and the
// exit code says what kind of failure it was (commands.h).
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "base/allocator.h"
#include "clients/cli/commands.h"
#include "clients/cli/yaml_config.h"
#include "runtime/blas_core.h"
#include "runtime/threads.h"

namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The deepest subcommand the command line selected (the root when none).
CLI::App* Selected(CLI::App* app) {
  for (CLI::App* sub : app->get_subcommands()) return Selected(sub);
  return app;
}

// "did you mean" for each word of the command line that no command or option
// took: the closest option or subcommand name of the selected command (or the
// global options), within an edit distance of a third of its length.
void SuggestFor(CLI::App& root, const std::vector<std::string>& args) {
  CLI::App* cmd = Selected(&root);
  std::vector<std::string> names;
  for (CLI::App* app : {cmd, &root}) {
    for (const CLI::Option* o : app->get_options()) {
      for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
    }
  }
  for (const CLI::App* sub : cmd->get_subcommands({}))
    names.push_back(sub->get_name());
  for (const std::string& raw : args) {
    const std::string word = raw.substr(0, raw.find('='));
    if (word.empty() ||
        std::find(names.begin(), names.end(), word) != names.end())
      continue;
    std::string best;
    size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
    for (const std::string& n : names) {
      const size_t d = EditDistance(word, n);
      if (d < best_d) {
        best_d = d;
        best = n;
      }
    }
    if (!best.empty())
      std::cerr << "lrkv: '" << word << "': did you mean '" << best << "'?\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  lrkv::UseBestOpenBlasCore(argv);
  lrkv::ConfigureAllocator();
  CLI::App app{"lrkv: LRKV model surgery and verification"};
  lrkv::cli::AddGlobalOptions(app);
  lrkv::cli::AddConfigFileOption(app);
  app.require_subcommand(1);
  int exit_code = lrkv::cli::kExitOk;
  lrkv::cli::AddModelCommands(app, &exit_code);
  lrkv::cli::AddSurgeryCommands(app, &exit_code);
  lrkv::cli::AddVerifyCommands(app, &exit_code);
  lrkv::cli::AddHealCommands(app, &exit_code);
  lrkv::cli::AddCompareCommands(app, &exit_code);
#ifdef LRKV_WITH_CLIENT
  lrkv::cli::AddClientCommands(app, &exit_code);
  lrkv::cli::AddArtifactCommands(app, &exit_code);
#endif
  lrkv::cli::AddBenchCommands(app, &exit_code);
  lrkv::cli::AddTokenizeCommands(app, &exit_code);
  lrkv::cli::AddServeCommands(app, &exit_code);
  lrkv::cli::AddOptionsCommand(app, &exit_code);
  lrkv::ConfigureThreads();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse compare.bogus-key": name the file
    // and the key.
    const std::string what = e.what();
    const std::string key = what.substr(what.rfind('.') + 1);
    std::cerr << "lrkv: error: -f: '" << key
              << "' is not an option of this command\n";
    SuggestFor(app, {"--" + key});
    return lrkv::cli::kExitUsage;
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    if (rc == 0) return lrkv::cli::kExitOk;  // --help, --version
    std::vector<std::string> words(argv + 1, argv + argc);
    std::vector<std::string> unknown;
    for (CLI::App* a = &app; a != nullptr;) {
      for (const std::string& w : a->remaining()) unknown.push_back(w);
      CLI::App* next = nullptr;
      for (CLI::App* sub : a->get_subcommands()) next = sub;
      a = next;
    }
    SuggestFor(app, unknown.empty() ? words : unknown);
    return lrkv::cli::kExitUsage;
  }
  return exit_code;
}
