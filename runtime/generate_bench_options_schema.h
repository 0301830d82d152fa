// `bench generate`'s timing options, declared once for `lrkv bench generate`
// and the bench stage of lrkvd's pipeline jobs (base/option_schema.h). Which
// checkpoints are timed is the caller's (the command's --checkpoint and
// --source, the pipeline's converted model and its source).
#ifndef LRKV_RUNTIME_GENERATE_BENCH_OPTIONS_SCHEMA_H_
#define LRKV_RUNTIME_GENERATE_BENCH_OPTIONS_SCHEMA_H_

#include "base/option_schema.h"
#include "runtime/generate_bench.h"

namespace lrkv {

const OptionSchema<GenerateBenchOptions>& GenerateBenchOptionSchema();

}  // namespace lrkv

#endif  // LRKV_RUNTIME_GENERATE_BENCH_OPTIONS_SCHEMA_H_
