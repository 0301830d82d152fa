// What every report records about where it came from (as lm-eval's results do):
// the lrkv version and git commit built, the host, its CPU, the threads used,
// and the date.
#ifndef LRKV_RUNTIME_PROVENANCE_H_
#define LRKV_RUNTIME_PROVENANCE_H_

#include <string>

#include "nlohmann/json.hpp"

namespace lrkv {

// "lrkv 0.9.0 (git abc1234, 2026-12-01)" (-dirty when built from uncommitted
// changes).
std::string VersionString();

// {"lrkv_version", "git_commit", "host", "cpu", "threads", "date" (UTC, ISO
// 8601)}.
nlohmann::json Provenance();

}  // namespace lrkv

#endif  // LRKV_RUNTIME_PROVENANCE_H_
