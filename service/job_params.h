// Parsing a job's params_json into the core library's job options, with the
// names of the `lrkv` command-line options; unknown names are INVALID_ARGUMENT.
#ifndef LRKV_SERVICE_JOB_PARAMS_H_
#define LRKV_SERVICE_JOB_PARAMS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/config.h"
#include "kernels/decode_bench.h"
#include "runtime/generate_bench.h"
#include "service/params_json.h"
#include "study/compare_job.h"
#include "surgery/convert_job.h"
#include "train/heal_job.h"
#include "verify/verify_job.h"

namespace lrkv::service {

// `checkpoint` and `out_dir` are filled by the server, not the client.
absl::StatusOr<ConvertJobOptions> ParseConvertParams(
    const std::string& json, const std::string& checkpoint,
    const std::string& out_dir);
absl::StatusOr<VerifyJobOptions> ParseVerifyParams(
    const std::string& json, const std::string& checkpoint);
// `teacher` holds the "teacher" checkpoint id, which the server resolves to its path.
absl::StatusOr<HealJobOptions> ParseHealParams(const std::string& json,
                                               const std::string& checkpoint,
                                               const std::string& out_dir);
// A pipeline's parameters: one JSON object per stage ("heal" optional); the
// bench stage's are `lrkv bench generate`'s timing options
// (runtime/generate_bench_options_schema.h), a shorter run by default.
struct PipelineParams {
  std::string convert_json = "{}", heal_json, verify_json = "{}";
  GenerateBenchOptions bench = [] {
    GenerateBenchOptions o;
    o.context = 512;
    o.tokens = 16;
    return o;
  }();
};
absl::StatusOr<PipelineParams> ParsePipelineParams(const std::string& json);

// A bench job: the decode kernels at the checkpoint's attention shape, LRKV at
// "rank" or at the rank that fills "budget" (default 0.5) of the source cache.
absl::StatusOr<kernels::DecodeBenchOptions> ParseBenchParams(
    const std::string& json, const ModelConfig& config);

// A compare job, with the names of the `lrkv compare` options ("budget",
// "variants", "rope_mode" and "context" are arrays); `work_dir` is filled by
// the server.
absl::StatusOr<CompareJobOptions> ParseCompareParams(
    const std::string& json, const std::string& checkpoint,
    const std::string& work_dir);

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_JOB_PARAMS_H_
