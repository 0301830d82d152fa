// RemoteJob for builds without the gRPC client (the `core` build scope): every
// command runs here; --server is refused with a clear message.
#include <iostream>

#include "clients/cli/commands.h"
#include "clients/cli/remote.h"

namespace lrkv::cli {

void AddConnectionOptions(CLI::App* cmd, ConnectionArgs* a) {
  cmd->add_option("--server", a->server, "lrkvd address (not in this build)");
}

std::shared_ptr<RemoteJob> RemoteJob::Attach(CLI::App* cmd, RemoteSpec spec) {
  auto job = std::shared_ptr<RemoteJob>(new RemoteJob());
  job->cmd_ = cmd;
  job->spec_ = std::move(spec);
  AddConnectionOptions(cmd, &job->conn_);
  return job;
}

bool RemoteJob::Requested() const { return !conn_.server.empty(); }

int RemoteJob::Run() const {
  std::cerr << "lrkv: error: this lrkv was built without the gRPC client "
               "(LRKV_BUILD_SCOPE=core); "
               "run without --server\n";
  return kExitUsage;
}

}  // namespace lrkv::cli
