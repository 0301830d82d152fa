// Running `lrkv` commands on lrkvd (the global --server or $LRKV_SERVER, with
// --token-file and --tls-ca): RemoteJob turns a local command (convert, verify, heal,
// compare, bench decode) into a submitted job: its parsed options become the job's
// params_json, progress is shown on stderr while it runs (a bar on a TTY, plain lines
// otherwise or with LRKV_NO_PROGRESS=1), and the report is printed as the local command
// prints it (or as JSON with --json). Exit codes as commands.h says.
#ifndef LRKV_CLIENTS_CLI_REMOTE_H_
#define LRKV_CLIENTS_CLI_REMOTE_H_

#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "CLI/CLI.hpp"
#include "clients/cli/commands.h"
#include "clients/cli/schema_flags.h"

namespace lrkv::cli {

// How a local command maps onto a job.
struct RemoteSpec {
  std::string kind;  // convert | verify | heal | bench | compare | pipeline
  // The command's options from its schema: the job's parameters are their Given()
  // values (paths made absolute, checkpoints sent as server ids); a local-only option,
  // or a flag of the command outside the schema but its outputs, is refused.
  std::shared_ptr<SchemaFlags> flags;
  // Without a schema (bench decode): options that are not job parameters (outputs,
  // connection options are always skipped).
  std::set<std::string> skip;
  // Option name -> parameter name where they differ ("rope_mode" ->
  // "rope_modes").
  std::map<std::string, std::string> rename;
  // Options whose values are comma lists sent as JSON arrays.
  std::set<std::string> lists;
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
  CLI::App* cmd_ = nullptr;
  RemoteSpec spec_;
  bool detach_ = false;
};

// Shared by remote.cc and, in builds without the gRPC client, remote_stub.cc.
inline std::shared_ptr<RemoteJob> RemoteJob::Attach(CLI::App* cmd, RemoteSpec spec) {
  auto job = std::shared_ptr<RemoteJob>(new RemoteJob());
  job->cmd_ = cmd;
  job->spec_ = std::move(spec);
  cmd->add_flag("--detach", job->detach_, "With a server: print the job id and return");
  return job;
}

inline bool RemoteJob::Requested() const {
  if (Globals().local) return false;
  const char* env = std::getenv("LRKV_SERVER");
  return !Globals().conn.server.empty() || (env != nullptr && *env != '\0');
}

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_REMOTE_H_
