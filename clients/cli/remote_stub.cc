// RemoteJob for builds without the gRPC client (the `core` build scope): every
// command runs here; --server is refused with a clear message.
#include <cstdlib>
#include <iostream>

#include "clients/cli/commands.h"
#include "clients/cli/remote.h"

namespace lrkv::cli {

std::shared_ptr<RemoteJob> RemoteJob::Attach(CLI::App* cmd, RemoteSpec spec) {
  auto job = std::shared_ptr<RemoteJob>(new RemoteJob());
  job->cmd_ = cmd;
  job->spec_ = std::move(spec);
  cmd->add_flag("--detach", job->detach_, "With a server: print the job id and return");
  return job;
}

bool RemoteJob::Requested() const {
  const char* env = std::getenv("LRKV_SERVER");
  return !Globals().local &&
         (!Globals().conn.server.empty() || (env != nullptr && *env != '\0'));
}

int RemoteJob::Run() const {
  return UsageError(
      "this lrkv was built without the gRPC client (LRKV_BUILD_SCOPE=core); run without "
      "--server (or with --local)");
}

}  // namespace lrkv::cli
