// The decode bench options (see decode_bench_options_schema.h).
#include "kernels/decode_bench_options_schema.h"

#include "kernels/cache_dtype_option.h"

namespace lrkv::kernels {
namespace {

using Options = DecodeBenchJobOptions;

// The attention shape timed: a local run's (a job's is its checkpoint's).
void AddShapeOptions(OptionSchema<Options>& s) {
  s.Value(
       "heads", [](Options & o) -> auto& { return o.bench.heads; },
       "Query heads H")
      .Range(1, 4096)
      .LocalOnly();
  s.Value(
       "source_kv_heads", [](Options & o) -> auto& { return o.bench.kv_heads; },
       "Source KV heads (0: H, MHA)")
      .Range(0, 4096)
      .LocalOnly();
  s.Value(
       "head_dim", [](Options & o) -> auto& { return o.bench.head_dim; },
       "Head dim d_h")
      .Range(1, 4096)
      .LocalOnly();
}

OptionSchema<Options> Build() {
  OptionSchema<Options> s("bench decode");
  AddShapeOptions(s);
  s.Value(
       "rank", [](Options & o) -> auto& { return o.rank; },
       "LRKV rank r (default: the largest within --budget)")
      .Min(0);
  s.Value(
       "budget", [](Options & o) -> auto& { return o.budget; },
       "Cache budget of the LRKV rows, a fraction of the source cache "
       "(instead of --rank; default 0.5)")
      .Above(0, 1);
  s.Value(
       "batch", [](Options & o) -> auto& { return o.bench.batch; },
       "Sequences decoded together")
      .Range(1, 256);
  s.Value(
       "context", [](Options & o) -> auto& { return o.bench.contexts; },
       "Context lengths (a comma list)")
      .Range(1, 1 << 22)
      .NonEmpty();
  AddCacheDtypesOption(
      s, [](Options & o) -> auto& { return o.bench.cache_dtypes; },
      "KV-cache storages timed side by side in one run (a comma list): bf16, "
      "f32, q8 (ggml's Q8_0), q4 (Q4_0); every variant a row per storage, "
      "with its time over the first storage's")
      .NonEmpty();
  s.Value(
       "device", [](Options & o) -> auto& { return o.device; },
       "cpu | cuda (the CUDA kernels, when built with nvcc)")
      .Choices({"cpu", "cuda"})
      .LocalOnly();
  s.Value(
       "threads", [](Options & o) -> auto& { return o.bench.threads; },
       "OpenMP threads (0: all CPUs)")
      .Range(0, 1024);
  s.Value(
       "iterations", [](Options & o) -> auto& { return o.bench.iterations; },
       "Timed steps per variant and context")
      .Range(1, 1000);
  s.Check([](const Options& o, OptionSource source) -> absl::Status {
    if (o.rank && o.budget) {
      return absl::InvalidArgumentError(OptionName("rank", source) + " and " +
                                        OptionName("budget", source) +
                                        " both set the LRKV rank; give one");
    }
    return absl::OkStatus();
  });
  return s;
}

}  // namespace

const OptionSchema<DecodeBenchJobOptions>& DecodeBenchOptionSchema() {
  static const OptionSchema<DecodeBenchJobOptions> schema = Build();
  return schema;
}

}  // namespace lrkv::kernels
