// The options of `lrkv verify` and of lrkvd's verify jobs, declared once
// (base/option_schema.h); their ranges are ValidateVerifyJobOptions's.
#ifndef LRKV_VERIFY_VERIFY_OPTIONS_SCHEMA_H_
#define LRKV_VERIFY_VERIFY_OPTIONS_SCHEMA_H_

#include "base/option_schema.h"
#include "verify/verify_job.h"

namespace lrkv {

const OptionSchema<VerifyJobOptions>& VerifyOptionSchema();

}  // namespace lrkv

#endif  // LRKV_VERIFY_VERIFY_OPTIONS_SCHEMA_H_
