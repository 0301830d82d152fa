// Report provenance (see provenance.h).
#include "runtime/provenance.h"

#include <unistd.h>

#include <ctime>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "lrkv_version.h"
#include "runtime/threads.h"

namespace lrkv {
namespace {

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Commit() {
  return std::string(LRKV_GIT_COMMIT) + (LRKV_GIT_DIRTY ? "-dirty" : "");
}

}  // namespace

std::string VersionString() {
  return absl::StrCat("lrkv ", LRKV_VERSION, " (git ", Commit(), ", ",
                      LRKV_GIT_DATE, ")");
}

nlohmann::json Provenance() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return {{"lrkv_version", LRKV_VERSION},
          {"git_commit", Commit()},
          {"host", host},
          {"cpu", CpuModel()},
          {"threads", ThreadCount()},
          {"date", UtcNow()}};
}

}  // namespace lrkv
