// Builds a job's typed v1::Report from the store's measurement tables
// (conversion, verification, cache, latency, loss curve, evaluations,
// comparison rows).
#ifndef LRKV_SERVICE_REPORT_BUILDER_H_
#define LRKV_SERVICE_REPORT_BUILDER_H_

#include <string>

#include "absl/status/status.h"
#include "lrkv/v1/lrkv.pb.h"
#include "service/store.h"

namespace lrkv::service {

// Fills every section the job has rows for; `out->json` is left to the caller.
absl::Status FillReportSections(Store& store, const std::string& job_id,
                                v1::Report* out);

}  // namespace lrkv::service

#endif  // LRKV_SERVICE_REPORT_BUILDER_H_
