// The verify options (see verify_options_schema.h).
#include "verify/verify_options_schema.h"

namespace lrkv {
namespace {

using Options = VerifyJobOptions;

OptionSchema<Options> Build() {
  OptionSchema<Options> s("verify");
  s.Value(
       "source", [](Options & o) -> auto& { return o.source; },
       "The model it was converted from (fidelity and head diversity)")
      .Checkpoint();
  // params_json called it rope_modes before the option schema; both names are
  // taken.
  s.Value(
       "rope_mode", [](Options & o) -> auto& { return o.modes; },
       "Decode modes to check: reconstruct | plane | partial | naive | "
       "shared-plane | "
       "all (a comma list)")
      .Choices(
          {"reconstruct", "plane", "partial", "naive", "shared-plane", "all"})
      .NonEmpty()
      .Alias("rope_modes");
  s.Value(
      "prompt_tokens", [](Options & o) -> auto& { return o.prompt_tokens; },
      "Teacher-forced prompt tokens");
  s.Value(
      "decode_tokens", [](Options & o) -> auto& { return o.decode_tokens; },
      "Greedy steps after the prompt");
  s.Value(
      "dtype", [](Options & o) -> auto& { return o.dtype; },
      "Cache storage: fp32 | bf16 | both");
  s.Value(
       "text", [](Options & o) -> auto& { return o.text; },
       "Text for the prompt and for fidelity")
      .Path();
  s.Value(
      "fidelity_tokens", [](Options & o) -> auto& { return o.fidelity_tokens; },
      "Positions for fidelity");
  s.Value(
       "max_ppl_increase",
       [](Options & o) -> auto& { return o.max_ppl_increase; },
       "Quality gate (with --source and --text): fail when the converted "
       "perplexity "
       "exceeds the source's by more than this fraction (0.05: 5%)")
      .Range(-1, 1e6);
  s.Value(
       "min_top1", [](Options & o) -> auto& { return o.min_top1; },
       "Quality gate: fail when top-1 agreement with the source is below this "
       "(0.9: 90%)")
      .Range(0, 1);
  s.Value(
       "max_kl", [](Options & o) -> auto& { return o.max_kl; },
       "Quality gate: fail when the mean KL(source||converted) exceeds this "
       "many nats")
      .Min(0);
  s.Check([](const Options& o, OptionSource) {
    return ValidateVerifyJobOptions(o);
  });
  return s;
}

}  // namespace

const OptionSchema<VerifyJobOptions>& VerifyOptionSchema() {
  static const OptionSchema<VerifyJobOptions> schema = Build();
  return schema;
}

}  // namespace lrkv
