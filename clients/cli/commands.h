// The `lrkv` subcommands. Each Add*Commands registers its subcommands on the
// app; the chosen one's callback stores its exit code in *exit_code.
//
// One contract for every command, local or through lrkvd:
//   exit 0  ok
//   exit 1  a check or verdict failed (verify, a report with a failed check)
//   exit 2  usage or invalid input (a bad flag or value, a missing or malformed file,
//           a parameter the server refused)
//   exit 3  server or transport (cannot connect, authentication, a job that failed)
//   exit 4  internal error
// The global options (--server, --token-file, --tls-ca, --json, --local, -v) may come
// before or after the subcommand. --json always means "the machine-readable result on
// stdout and nothing else there"; files are written with --json-out FILE.
#ifndef LRKV_CLIENTS_CLI_COMMANDS_H_
#define LRKV_CLIENTS_CLI_COMMANDS_H_

#include <chrono>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "base/stop_check.h"
#include "clients/cli/stage_progress.h"
#include "nlohmann/json.hpp"

namespace lrkv::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitServer = 3;
inline constexpr int kExitInternal = 4;

// Where lrkvd is and how to reach it.
struct ConnectionArgs {
  std::string server;      // host:port (default $LRKV_SERVER, then 127.0.0.1:50051)
  std::string token_file;  // bearer token file (default $LRKV_TOKEN_FILE)
  std::string tls_ca;      // PEM CA certificate: speak TLS (default $LRKV_TLS_CA)
};

// The options every command shares, set on the root app.
struct GlobalOptions {
  ConnectionArgs conn;
  bool json = false;     // machine-readable result on stdout, nothing else there
  bool local = false;    // run here even when $LRKV_SERVER is set
  bool verbose = false;  // gRPC's own logs, and more detail on errors
};
GlobalOptions& Globals();

// Adds the global options to the root `app` (and lets every subcommand pass them up).
// Call before adding subcommands.
void AddGlobalOptions(CLI::App& app);

// "lrkv 0.5.0 (git abc1234, built 2026-12-01)".
std::string VersionString();
// The build and machine facts every report records (version, commit, host, threads).
nlohmann::json BuildProvenance();

// Installs the SIGINT/SIGTERM handlers of a long local command and returns its stop
// check: the first signal makes the check true (the job ends with CancelledError, exit
// 3, and removes its partial output), a second one kills the process.
StopCheck InterruptCheck();

// The exit code for a failed local operation: 2 for what the input got wrong, 4 for an
// internal error.
int ExitCodeFor(absl::StatusCode code);
// Prints "lrkv: error: <message>" on one line and returns ExitCodeFor(its code).
int Fail(const absl::Status& status);
// Prints "lrkv: error: <message>" and returns kExitUsage.
int UsageError(const std::string& message);

// An option's text as the JSON value a job parameter takes: an integer, a number,
// true/false, else the string itself.
nlohmann::json JsonScalar(const std::string& text);

// Writes `text` to `path` (for --json-out, --junit, --html); PermissionDenied naming it.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

// A local command's report, with its provenance added: the JSON on stdout under --json,
// else `table`; and the JSON to `json_out` when given. kExitOk, or Fail's code.
int EmitLocalReport(nlohmann::json report, const std::string& table,
                    const std::string& json_out);

void AddModelCommands(CLI::App& app, int* exit_code);  // eval, generate, sysinfo, version
void AddSurgeryCommands(CLI::App& app,
                        int* exit_code);                // cache, convert, bench
void AddVerifyCommands(CLI::App& app, int* exit_code);  // verify
void AddHealCommands(CLI::App& app, int* exit_code);    // heal
void AddClientCommands(
    CLI::App& app, int* exit_code);  // register, upload, jobs, report, pipeline
void AddArtifactCommands(CLI::App& app, int* exit_code);  // artifacts get
void AddCompareCommands(CLI::App& app, int* exit_code);  // compare
// After AddSurgeryCommands, which creates `bench`.
void AddTokenizeCommands(CLI::App& app, int* exit_code);  // tokenize, bench tokenize
void AddBenchCommands(CLI::App& app, int* exit_code);  // bench decode
void AddServeCommands(CLI::App& app, int* exit_code);  // serve, bench serve
// Last: lists the commands added before it.
void AddOptionsCommand(CLI::App& app, int* exit_code);  // options (hidden)

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_COMMANDS_H_
