// What every `lrkv` command shares (commands.h): the global options, the
// exit-code contract, the version and the provenance block of reports.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "clients/cli/commands.h"
#include "clients/cli/schema_flags.h"
#include "clients/cli/yaml_config.h"
#include "runtime/provenance.h"

namespace lrkv::cli {

nlohmann::json JsonScalar(const std::string& s) {
  int64_t i;
  double d;
  if (absl::SimpleAtoi(s, &i)) return i;
  if (absl::SimpleAtod(s, &d)) return d;
  if (s == "true") return true;
  if (s == "false") return false;
  return s;
}

GlobalOptions& Globals() {
  static GlobalOptions options;
  return options;
}

namespace {

// The global options, before or after the command.
const OptionSchema<GlobalOptions>& GlobalOptionSchema() {
  using G = GlobalOptions;
  static const OptionSchema<G> schema = [] {
    const std::string group = "Global options";
    OptionSchema<G> s("lrkv");
    s.Value(
         "server", [](G & g) -> auto& { return g.conn.server; },
         "lrkvd address (default $LRKV_SERVER; with neither, commands run "
         "here)")
        .Group(group);
    s.Value(
         "token_file", [](G & g) -> auto& { return g.conn.token_file; },
         "Bearer token file (default $LRKV_TOKEN_FILE)")
        .Path()
        .Group(group);
    s.Value(
         "tls_ca", [](G & g) -> auto& { return g.conn.tls_ca; },
         "PEM CA certificate: speak TLS (or $LRKV_TLS_CA)")
        .Path()
        .Group(group);
    s.Value(
         "json", [](G & g) -> auto& { return g.json; },
         "Print the machine-readable result on stdout, nothing else there")
        .Group(group);
    s.Value(
         "local", [](G & g) -> auto& { return g.local; },
         "Run here even when $LRKV_SERVER is set")
        .Group(group);
    s.Value(
         "verbose", [](G & g) -> auto& { return g.verbose; },
         "gRPC's own logs and more detail")
        .Short('v')
        .Group(group);
    return s;
  }();
  return schema;
}

}  // namespace

void AddGlobalOptions(CLI::App& app) {
  // Subcommands created after this pass options they do not know up to their
  // parent, so that `lrkv --server A jobs list` and `lrkv jobs list --server A`
  // both work.
  app.fallthrough();
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", VersionString());
  // Inherited by every subcommand's --help, which does not list its parents'
  // options.
  app.footer(
      "Global options, before or after the command: --server ADDR, "
      "--token-file FILE, "
      "--tls-ca FILE, --json, --local, -v/--verbose, --version (see lrkv "
      "--help).\n"
      "Exit codes: 0 ok, 1 a check failed, 2 usage or invalid input, 3 server "
      "or "
      "transport, 4 internal.");
  auto flags = AddSchemaFlags(&app, GlobalOptionSchema());
  // Stored before any command's callback runs (CLI11 runs the root's
  // parse-complete callback first). gRPC core logs (a bad certificate, a
  // refused connection) go to stderr by default; the commands say what went
  // wrong in one line instead, unless -v asks for them.
  app.parse_complete_callback([flags] {
    auto parsed = ParseFlags(*flags, GlobalOptionSchema(), GlobalOptions{});
    if (parsed.ok()) Globals() = *std::move(parsed);
    if (!Globals().verbose) setenv("GRPC_VERBOSITY", "NONE", 0);
  });
}

std::string VersionString() { return lrkv::VersionString(); }

nlohmann::json BuildProvenance() {
  nlohmann::json p = lrkv::Provenance();
  if (nlohmann::json file = ConfigFileRecord(); !file.is_null())
    p["config_file"] = file;
  return p;
}

namespace {

volatile std::sig_atomic_t g_interrupted = 0;

// The first SIGINT or SIGTERM asks the running command to stop at its next safe point
// (between layers, steps, documents), which removes what it was writing; a second one
// ends the process at once.
void OnInterrupt(int sig) {
  if (g_interrupted) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_interrupted = 1;
  static const char kMessage[] =
      "\nlrkv: stopping at the next safe point; nothing half-written is kept (again to "
      "kill)\n";
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
}

}  // namespace

StopCheck InterruptCheck() {
  static const bool installed = [] {
    std::signal(SIGINT, OnInterrupt);
    std::signal(SIGTERM, OnInterrupt);
    return true;
  }();
  (void)installed;
  return [] { return g_interrupted != 0; };
}

int ExitCodeFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnimplemented:
      return kExitUsage;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDataLoss:
      return kExitServer;
    default:
      return kExitInternal;
  }
}

int Fail(const absl::Status& status) {
  std::string msg(status.message());
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  std::cerr << "lrkv: error: " << msg << "\n";
  return ExitCodeFor(status.code());
}

int UsageError(const std::string& message) {
  std::cerr << "lrkv: error: " << message << "\n";
  return kExitUsage;
}

int EmitLocalReport(nlohmann::json report, const std::string& table,
                    const std::string& json_out) {
  report["provenance"] = BuildProvenance();
  if (Globals().json) {
    std::cout << report.dump(2) << "\n";
  } else {
    std::cout << table;
  }
  if (!json_out.empty()) {
    if (auto st = WriteTextFile(json_out, report.dump(2) + "\n"); !st.ok())
      return Fail(st);
  }
  return kExitOk;
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out)
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

}  // namespace lrkv::cli
