// RemoteJob for builds without the gRPC client (the `core` build scope): every
// command runs here; --server is refused with a clear message.
#include <cstdlib>
#include <iostream>

#include "clients/cli/commands.h"
#include "clients/cli/remote.h"

namespace lrkv::cli {

int RemoteJob::Run() const {
  return UsageError(
      "this lrkv was built without the gRPC client (LRKV_BUILD_SCOPE=core); run without "
      "--server (or with --local)");
}

}  // namespace lrkv::cli
