// `bench decode`'s options, declared once for `lrkv bench decode`,
// `lrkv-kernel-bench` and lrkvd's bench jobs (base/option_schema.h). A job
// takes the attention shape from its checkpoint, so the shape and the device
// are a local run's only.
#ifndef LRKV_KERNELS_DECODE_BENCH_OPTIONS_SCHEMA_H_
#define LRKV_KERNELS_DECODE_BENCH_OPTIONS_SCHEMA_H_

#include <cstdint>
#include <optional>
#include <string>

#include "base/option_schema.h"
#include "kernels/decode_bench.h"

namespace lrkv::kernels {

struct DecodeBenchJobOptions {
  // The shape, batch, contexts, cache storage, threads and timed steps; its
  // rank is set from `rank`, or from `budget` by whoever knows the shape.
  DecodeBenchOptions bench;
  std::optional<int64_t> rank;
  std::optional<double> budget;  // unset: 0.5 when rank is unset too
  std::string device = "cpu";    // cpu | cuda
};

const OptionSchema<DecodeBenchJobOptions>& DecodeBenchOptionSchema();

}  // namespace lrkv::kernels

#endif  // LRKV_KERNELS_DECODE_BENCH_OPTIONS_SCHEMA_H_
