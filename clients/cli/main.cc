// `lrkv`: the command-line front end. Commands parse arguments and call the
// core library; errors print one line naming the file and the problem.
#include <iostream>

#include "clients/cli/commands.h"
#include "model/blas_core.h"
#include "model/threads.h"

namespace lrkv::cli {

int Fail(const absl::Status& status) {
  std::string msg(status.message());
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  std::cerr << "lrkv: error: " << msg << "\n";
  return kExitFailure;
}

}  // namespace lrkv::cli

int main(int argc, char** argv) {
  lrkv::UseBestOpenBlasCore(argv);
  CLI::App app{"lrkv: LRKV model surgery and verification"};
  app.require_subcommand(1);
  int exit_code = lrkv::cli::kExitOk;
  lrkv::cli::AddModelCommands(app, &exit_code);
  lrkv::cli::AddSurgeryCommands(app, &exit_code);
  lrkv::cli::AddVerifyCommands(app, &exit_code);
  lrkv::cli::AddHealCommands(app, &exit_code);
  lrkv::cli::AddCompareCommands(app, &exit_code);
#ifdef LRKV_WITH_CLIENT
  lrkv::cli::AddClientCommands(app, &exit_code);
#endif
  lrkv::cli::AddBenchCommands(app, &exit_code);
  lrkv::cli::AddTokenizeCommands(app, &exit_code);
  lrkv::ConfigureThreads();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? lrkv::cli::kExitOk : lrkv::cli::kExitUsage;
  }
  return exit_code;
}
