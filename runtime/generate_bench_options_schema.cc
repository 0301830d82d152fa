// The generate bench options (see generate_bench_options_schema.h).
#include "runtime/generate_bench_options_schema.h"

#include "kernels/cache_dtype_option.h"

namespace lrkv {
namespace {

using Options = GenerateBenchOptions;

OptionSchema<Options> Build() {
  OptionSchema<Options> s("bench generate");
  s.Value(
      "mode", [](Options & o) -> auto& { return o.mode; },
      "Factored decode mode: auto (the one the checkpoint was converted for) "
      "| plane | reconstruct | partial");
  s.Value(
       "context", [](Options & o) -> auto& { return o.context; },
       "Tokens in the cache before timing")
      .Range(1, 1 << 20);
  s.Value(
       "tokens", [](Options & o) -> auto& { return o.tokens; },
       "Timed decode steps")
      .Range(1, 100000);
  s.Value(
       "rounds", [](Options & o) -> auto& { return o.rounds; },
       "Time every engine this many times, one at a time, in the reverse "
       "order every other round (the machine's drift falls on all alike); "
       "prints each round's ratio to the source")
      .Range(1, 100);
  kernels::AddCacheDtypesOption(
      s, [](Options & o) -> auto& { return o.cache_dtypes; },
      "KV-cache storages (a comma list): bf16, f32, q8 (ggml's Q8_0), q4 "
      "(Q4_0); every engine is timed with each in the same rounds")
      .NonEmpty();
  s.Value(
       "cache_layout", [](Options & o) -> auto& { return o.cache_layout; },
       "Plane mode's factored cache: auto (tiles where the fused kernel runs) "
       "| rows | tiles")
      .Choices({"auto", "rows", "tiles"});
  return s;
}

}  // namespace

const OptionSchema<GenerateBenchOptions>& GenerateBenchOptionSchema() {
  static const OptionSchema<GenerateBenchOptions> schema = Build();
  return schema;
}

}  // namespace lrkv
