// A job's params_json as the client sent it: parsed within the request limits
// (base/json_limits.h) and rewritten where it names input files. No LibTorch and no gRPC,
// so that the fuzz targets (fuzz/fuzz_params_json.cc) build it in the sanitizer scope.
#ifndef LRKV_SERVICE_PARAMS_JSON_H_
#define LRKV_SERVICE_PARAMS_JSON_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace lrkv::service {

// The parameter carrying the configuration file a job's parameters came from; every
// kind accepts it and keeps it in the job's params_json.
inline constexpr char kConfigFileKey[] = "config_file";

// The parameters naming text files a job reads (calibration, evaluation, training text).
inline const std::vector<std::string> kTextInputKeys = {"calib", "eval", "text", "data"};
// The parameters naming a checkpoint a job reads besides its own (verify's source).
inline const std::vector<std::string> kCheckpointInputKeys = {"source"};

// params_json parsed strictly: one JSON value and nothing after it, no key twice in an
// object, no NUL byte or \u0000 escape, valid UTF-8, at most 1 MiB and 64 levels deep
// (kRequestJsonLimits). "" is the empty object. InvalidArgument naming what was wrong.
absl::StatusOr<nlohmann::json> ParseParamsJson(const std::string& text);

// params_json with the string value of each of `keys` (at any depth) replaced by
// replace(value); the first error replace returns. Walks the value with an explicit
// stack, never recursing on the client's nesting.
absl::StatusOr<std::string> ReplaceInputPaths(
    const std::string& json, const std::vector<std::string>& keys,
    const std::function<absl::StatusOr<std::string>(const std::string&)>& replace);

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_PARAMS_JSON_H_
