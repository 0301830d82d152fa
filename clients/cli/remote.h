// Running `lrkv` commands on lrkvd (the global --server or $LRKV_SERVER, with
// --token-file and --tls-ca): RemoteJob turns a local command (convert, verify, heal,
// compare, bench decode) into a submitted job: its parsed options become the job's
// params_json, progress is shown on stderr while it runs (a bar on a TTY, plain lines
// otherwise or with LRKV_NO_PROGRESS=1), and the report is printed as the local command
// prints it (or as JSON with --json). Exit codes as commands.h says.
#ifndef LRKV_CLIENTS_CLI_REMOTE_H_
#define LRKV_CLIENTS_CLI_REMOTE_H_

#include <cstdlib>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "clients/cli/commands.h"
#include "clients/cli/schema_flags.h"

namespace lrkv::cli {

// How a local command maps onto a job.
struct RemoteSpec {
  std::string kind;  // convert | verify | heal | bench | compare | pipeline
  // The command's options from its job's schema: the job's parameters are their
  // Given() values (paths made absolute, checkpoints sent as server ids); a
  // local-only option, or a flag of the command outside the schema but its
  // outputs, is refused.
  std::shared_ptr<SchemaFlags> flags;
};

class RemoteJob {
 public:
  // Adds --detach to `cmd`.
  static std::shared_ptr<RemoteJob> Attach(CLI::App* cmd, RemoteSpec spec);
  // True when the command should run on a server: --server or $LRKV_SERVER, unless
  // --local.
  bool Requested() const;
  // Submits the command as a job and follows it; returns the exit code.
  int Run() const;

 private:
  // --detach, given.
  bool Detached() const;

  CLI::App* cmd_ = nullptr;
  RemoteSpec spec_;
  std::shared_ptr<SchemaFlags> own_;  // --detach
};

// The options RemoteJob adds to a command.
struct RemoteFlags {
  bool detach = false;
};
inline const OptionSchema<RemoteFlags>& RemoteFlagSchema() {
  static const OptionSchema<RemoteFlags> schema = [] {
    OptionSchema<RemoteFlags> s("remote");
    s.Value(
        "detach", [](RemoteFlags & f) -> auto& { return f.detach; },
        "With a server: print the job id and return");
    return s;
  }();
  return schema;
}

// Shared by remote.cc and, in builds without the gRPC client, remote_stub.cc.
inline std::shared_ptr<RemoteJob> RemoteJob::Attach(CLI::App* cmd, RemoteSpec spec) {
  auto job = std::shared_ptr<RemoteJob>(new RemoteJob());
  job->cmd_ = cmd;
  job->spec_ = std::move(spec);
  job->own_ = AddSchemaFlags(cmd, RemoteFlagSchema());
  return job;
}

inline bool RemoteJob::Detached() const {
  return own_->Given().value("detach", false);
}

inline bool RemoteJob::Requested() const {
  if (Globals().local) return false;
  const char* env = std::getenv("LRKV_SERVER");
  return !Globals().conn.server.empty() || (env != nullptr && *env != '\0');
}

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_REMOTE_H_
