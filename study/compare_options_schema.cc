// The compare options (see compare_options_schema.h).
#include "study/compare_options_schema.h"

#include "kernels/cache_dtype_option.h"
#include "surgery/convert_options_schema.h"

namespace lrkv {
namespace {

using Options = CompareJobOptions;

// What is compared: budgets, variants, RoPE handling, sizes.
void AddStudyOptions(OptionSchema<Options>& s) {
  s.Value(
      "label", [](Options & o) -> auto& { return o.label; },
      "Name of the model in the report (default: the checkpoint's file name)");
  s.Value(
       "budget", [](Options & o) -> auto& { return o.budgets; },
       "Cache budgets (fractions of the source cache, a comma list)")
      .Above(0, 1)
      .NonEmpty();
  s.Value(
       "variants", [](Options & o) -> auto& { return o.variants; },
       "Comma list of gqa, mqa, mla, lrkv")
      .Choices({"gqa", "mqa", "mla", "lrkv"})
      .NonEmpty();
  s.Value(
       "rope_mode", [](Options & o) -> auto& { return o.rope_modes; },
       "RoPE handling: plane, reconstruct, partial, shared-plane (LRKV each; "
       "MLA "
       "reconstruct, and with partial also decoupled RoPE)")
      .Choices({"plane", "reconstruct", "partial", "shared-plane"});
  kernels::AddCacheDtypesOption(
      s, [](Options & o) -> auto& { return o.cache_dtypes; },
      "The study at equal bytes: score the source and every row through "
      "their KV caches in each storage (a comma list of bf16, f32, q8, q4), "
      "with the Pareto front of perplexity against cache bytes and the best "
      "entry at 50/25/12.5% of the source's bf16 bytes (default: none)")
      .Alias("cache_dtypes");
  s.Choice(
      "allocation", [](Options & o) -> auto& { return o.allocation; },
      {SizeAllocation::kUniform, SizeAllocation::kLayers}, SizeAllocationName,
      "LRKV/MLA sizes: uniform | layers (per-layer within each budget, by the "
      "measured loss on --calib text; shared-plane keeps one rank)");
  s.Value(
       "calib", [](Options & o) -> auto& { return o.calib; },
       "Calibration text (activation metric)")
      .Path();
  s.Parsed(
      "calib_range", [](Options & o) -> auto& { return o.calib_range; },
      ParseDocumentRange, DocumentRangeText,
      "Documents of --calib to use, A:B");
}

// How each variant is healed and measured.
void AddMeasureOptions(OptionSchema<Options>& s) {
  s.Value(
       "heal_steps", [](Options & o) -> auto& { return o.heal_steps; },
       "Healing steps per variant (0: none)")
      .Range(0, 1'000'000);
  s.Value(
       "data", [](Options & o) -> auto& { return o.data; }, "Healing text")
      .Path();
  s.Parsed(
      "data_range", [](Options & o) -> auto& { return o.data_range; },
      ParseDocumentRange, DocumentRangeText, "Documents of --data to use, A:B");
  s.Value(
       "heal_batch", [](Options & o) -> auto& { return o.heal_batch; },
       "Rows per healing step")
      .Range(1, 65536);
  s.Value(
       "heal_seq_len", [](Options & o) -> auto& { return o.heal_seq_len; },
       "Tokens per healing row")
      .Range(2, 1 << 20);
  s.Value(
       "heal_lr", [](Options & o) -> auto& { return o.heal_lr; },
       "Peak healing learning rate")
      .Above(0, 1);
  s.Value(
       "heal_warmup", [](Options & o) -> auto& { return o.heal_warmup; },
       "Healing warmup steps")
      .Range(0, 1'000'000);
  s.Value(
       "eval", [](Options & o) -> auto& { return o.eval; },
       "Held-out text (perplexity and KL)")
      .Path()
      .Required();
  s.Parsed(
      "eval_range", [](Options & o) -> auto& { return o.eval_range; },
      ParseDocumentRange, DocumentRangeText, "Documents of --eval to use, A:B");
  s.Value(
       "kl_tokens", [](Options & o) -> auto& { return o.kl_tokens; },
       "Positions for the KL measurement")
      .Range(1, 1 << 24);
  s.Value(
       "context", [](Options & o) -> auto& { return o.contexts; },
       "Context lengths for decode timing (a comma list)")
      .Range(1, 1 << 20);
  s.Value(
       "timed_tokens", [](Options & o) -> auto& { return o.timed_tokens; },
       "Timed decode steps per context")
      .Range(1, 100'000);
  s.Value(
       "work_dir", [](Options & o) -> auto& { return o.work_dir; },
       "Where converted and healed models go (default: a new temporary folder)")
      .LocalOnly();
}

OptionSchema<Options> Build() {
  OptionSchema<Options> s("compare");
  AddStudyOptions(s);
  AddMeasureOptions(s);
  s.Check([](const Options& o, OptionSource source) -> absl::Status {
    if (o.heal_steps > 0 && o.data.empty()) {
      return absl::InvalidArgumentError(
          OptionName("heal_steps", source) + " > 0 needs " +
          OptionName("data", source) + " (training text)");
    }
    return absl::OkStatus();
  });
  return s;
}

}  // namespace

const OptionSchema<CompareJobOptions>& CompareOptionSchema() {
  static const OptionSchema<CompareJobOptions> schema = Build();
  return schema;
}

}  // namespace lrkv
