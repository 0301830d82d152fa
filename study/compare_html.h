// The comparison study as a page people read: the table, and SVG plots of
// perplexity against cache ratio (one line per variant, before and after
// healing), perplexity against decode step time, and decode step time against
// context length.
#ifndef LRKV_STUDY_COMPARE_HTML_H_
#define LRKV_STUDY_COMPARE_HTML_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "study/compare_job.h"

namespace lrkv {

// Reads back CompareReport::ToJson(); InvalidArgument naming a missing field.
absl::StatusOr<CompareReport> CompareReportFromJson(const nlohmann::json& json);

// A standalone HTML page (inline SVG, no scripts). `provenance` says which job
// or command produced it.
std::string CompareReportHtml(const CompareReport& report,
                              const std::string& provenance);

}  // namespace lrkv

#endif  // LRKV_STUDY_COMPARE_HTML_H_
