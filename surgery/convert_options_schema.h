// The options of `lrkv convert` and of lrkvd's convert jobs, declared once
// (base/option_schema.h): the CLI's flags, the YAML keys and the job's
// params_json keys are generated from it. What depends on the source model
// (sizes against its shape, formats, inputs) is checked by
// ValidateConvertJobOptions.
#ifndef LRKV_SURGERY_CONVERT_OPTIONS_SCHEMA_H_
#define LRKV_SURGERY_CONVERT_OPTIONS_SCHEMA_H_

#include "base/option_schema.h"
#include "surgery/convert_job.h"

namespace lrkv {

const OptionSchema<ConvertJobOptions>& ConvertOptionSchema();

}  // namespace lrkv

#endif  // LRKV_SURGERY_CONVERT_OPTIONS_SCHEMA_H_
