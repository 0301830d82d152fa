// The options of `lrkv compare` and of lrkvd's compare jobs, declared once
// (base/option_schema.h).
#ifndef LRKV_STUDY_COMPARE_OPTIONS_SCHEMA_H_
#define LRKV_STUDY_COMPARE_OPTIONS_SCHEMA_H_

#include "base/option_schema.h"
#include "study/compare_job.h"

namespace lrkv {

const OptionSchema<CompareJobOptions>& CompareOptionSchema();

}  // namespace lrkv

#endif  // LRKV_STUDY_COMPARE_OPTIONS_SCHEMA_H_
