// Parsing a job's params_json into the core library's job options, with the names of
// the `lrkv` command-line options; unknown names are INVALID_ARGUMENT.
#ifndef LRKV_SERVICE_JOB_PARAMS_H_
#define LRKV_SERVICE_JOB_PARAMS_H_

#include <string>

#include "absl/status/statusor.h"
#include "surgery/convert_job.h"
#include "verify/verify_job.h"

namespace lrkv::service {

// `checkpoint` and `out_dir` are filled by the server, not the client.
absl::StatusOr<ConvertJobOptions> ParseConvertParams(const std::string& json,
                                                     const std::string& checkpoint,
                                                     const std::string& out_dir);
absl::StatusOr<VerifyJobOptions> ParseVerifyParams(const std::string& json,
                                                   const std::string& checkpoint);

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_JOB_PARAMS_H_
