// The convert options (see convert_options_schema.h).
#include "surgery/convert_options_schema.h"

#include "absl/strings/str_cat.h"

namespace lrkv {
namespace {

using Options = ConvertJobOptions;

// The target: variant and size.
void AddTargetOptions(OptionSchema<Options>& s) {
  s.Choice(
      "variant", [](Options & o) -> auto& { return o.conversion.variant; },
      {KvVariant::kLrkv, KvVariant::kGqa, KvVariant::kMqa, KvVariant::kMla},
      KvVariantName, "Target: lrkv | gqa | mqa | mla");
  s.Value(
       "rank", [](Options & o) -> auto& { return o.conversion.rank; },
       "LRKV rank r (default: from --budget)")
      .Min(0);
  s.Value(
       "kv_heads", [](Options & o) -> auto& { return o.conversion.kv_heads; },
       "GQA KV heads (default: from --budget)")
      .Min(1);
  s.Value(
       "latent", [](Options & o) -> auto& { return o.conversion.latent; },
       "MLA latent d_c (default: from --budget)")
      .Min(0);
  s.Value(
       "budget", [](Options & o) -> auto& { return o.conversion.budget; },
       "Cache budget as a fraction of the source cache: the largest size "
       "within it "
       "(instead of --rank, --kv-heads or --latent)")
      .Above(0, 1);
}

// How the decomposition is computed: metric, calibration, RoPE, sizes per
// layer, solver.
void AddMethodOptions(OptionSchema<Options>& s) {
  s.Choice(
      "metric", [](Options & o) -> auto& { return o.conversion.metric; },
      {SurgeryMetric::kWeight, SurgeryMetric::kActivation}, SurgeryMetricName,
      "weight | activation (calibration-whitened, needs --calib)");
  s.Value(
       "calib", [](Options & o) -> auto& { return o.calib_path; },
       "Calibration text (activation metric, allocation by loss)")
      .Path();
  s.Value(
      "calib_tokens", [](Options & o) -> auto& { return o.calib_tokens; },
      "Calibration tokens at most");
  s.Parsed(
      "calib_range", [](Options & o) -> auto& { return o.calib_range; },
      ParseDocumentRange, DocumentRangeText,
      "Documents of --calib to use, as fractions A:B (e.g. 0:0.5)");
  s.Choice(
      "rope_mode", [](Options & o) -> auto& { return o.rope_mode; },
      {std::optional<RopeMode>(), std::optional(RopeMode::kReconstruct),
       std::optional(RopeMode::kPlane), std::optional(RopeMode::kPartial),
       std::optional(RopeMode::kSharedPlane)},
      [](const std::optional<RopeMode>& m) {
        return m ? std::string(RopeModeName(*m)) : std::string("auto");
      },
      "What each costs per cached position at decode time. auto: LRKV plane "
      "(reconstruct for an odd --rank), MLA reconstruct. LRKV: reconstruct "
      "(exact "
      "for any rank; rebuilds each head's residual key, O(r*d_h): slower than "
      "the source "
      "at long context) | plane (exact; the residual spans whole RoPE planes, "
      "O(r): "
      "the fastest LRKV mode) | partial (RoPE kept on the highest-frequency "
      "planes "
      "only: an approximation, O(r)) | shared-plane (planes shared by the "
      "heads, "
      "O(H_kv*r); no fused kernel yet). MLA: reconstruct (exact, the latent "
      "up-projected per position) | partial (decoupled RoPE, the DeepSeek "
      "layout, "
      "absorbed)");
  s.Choice(
      "allocation",
      [](Options & o) -> auto& { return o.conversion.allocation; },
      {SizeAllocation::kUniform, SizeAllocation::kLayers}, SizeAllocationName,
      "LRKV/MLA: uniform (one size for every layer) | layers (per-layer sizes "
      "from "
      "each layer's error curve, within the same total cache)");
  s.Choice(
      "allocation_objective",
      [](Options & o) -> auto& { return o.conversion.allocation_objective; },
      {AllocationObjective::kAuto, AllocationObjective::kError,
       AllocationObjective::kLoss},
      AllocationObjectiveName,
      "--allocation layers: what each layer's curve measures: loss "
      "(calibration loss "
      "with that layer alone converted, needs --calib) | error (the "
      "decomposition's "
      "objective) | auto (loss when --calib is given and the variant runs "
      "densely, "
      "else error)");
  s.Value(
      "allocation_tokens",
      [](Options & o) -> auto& { return o.allocation_tokens; },
      "--allocation layers by loss: calibration tokens the loss is measured on "
      "(one "
      "forward pass over them per layer and candidate size)");
  s.Value(
      "latent_norm", [](Options & o) -> auto& { return o.latent_norm; },
      "MLA with decoupled RoPE: an RMSNorm on the latent, as DeepSeek-V3's "
      "kv_a_layernorm (default on for --format gguf|deepseek, which llama.cpp "
      "and stock DeepSeek code run with it; off otherwise); its weight fitted "
      "on --calib when given");
  s.Value(
      "rope_planes",
      [](Options & o) -> auto& { return o.conversion.rope_planes_kept; },
      "Partial mode: RoPE planes kept, the highest frequencies (default a "
      "quarter for "
      "LRKV, all for MLA, which caches 2 dims per plane beside its latent)");
  s.Value(
      "iters", [](Options & o) -> auto& { return o.conversion.max_iters; },
      "LRKV: alternating iterations at most (the solver stops earlier on "
      "--tol)");
  s.Value(
      "tol", [](Options & o) -> auto& { return o.conversion.tol; },
      "LRKV: converged once 5 steps together lower the objective by less than "
      "5x "
      "this fraction of it");
  s.Value(
      "damping", [](Options & o) -> auto& { return o.conversion.damping; },
      "Whitening damping (relative)");
}

// What is written, and the perplexity measured on the way.
void AddOutputOptions(OptionSchema<Options>& s) {
  s.Value(
       "eval", [](Options & o) -> auto& { return o.eval_path; },
       "Text for perplexity before/after")
      .Path();
  s.Parsed(
      "eval_range", [](Options & o) -> auto& { return o.eval_range; },
      ParseDocumentRange, DocumentRangeText, "Documents of --eval to use, A:B");
  s.Value(
      "expand", [](Options & o) -> auto& { return o.expand; },
      "Write a plain Llama checkpoint with materialised per-head K/V");
  s.Value(
       "format", [](Options & o) -> auto& { return o.format; },
       "safetensors | gguf (model.gguf for llama.cpp; GQA/MQA or --expand) | "
       "deepseek "
       "(DeepseekV3ForCausalLM layout; mla --rope-mode partial)")
      .Choices({"safetensors", "gguf", "deepseek"});
  s.Value(
       "weight_dtype", [](Options & o) -> auto& { return o.weight_dtype; },
       "auto | f32 | f16 | bf16: storage of the written matrices (auto: the "
       "source's; "
       "norms stay f32)")
      .Choices({"auto", "f32", "f16", "bf16"});
  s.Bytes(
      "max_shard_size", [](Options & o) -> auto& { return o.max_shard_bytes; },
      "Largest safetensors shard (5GB, 500MB, 2GiB, bytes); larger models are "
      "written "
      "as HF shards with model.safetensors.index.json",
      "5GB");
}

OptionSchema<Options> Build() {
  OptionSchema<Options> s("convert");
  AddTargetOptions(s);
  AddMethodOptions(s);
  AddOutputOptions(s);
  s.Check([](const Options& o, OptionSource source) -> absl::Status {
    // Calibration text is read by the activation metric and by per-layer sizes;
    // given to neither, it would be ignored without a word.
    if (!o.calib_path.empty() &&
        o.conversion.metric == SurgeryMetric::kWeight &&
        o.conversion.allocation == SizeAllocation::kUniform &&
        !WithAutoResolved(o).conversion.latent_norm) {
      return absl::InvalidArgumentError(absl::StrCat(
          OptionName("calib", source), " is read only by ",
          OptionName("metric", source), " activation, ",
          OptionName("allocation", source), " layers or the MLA latent norm (",
          OptionName("latent_norm", source),
          "); with none of them it would be ignored"));
    }
    return absl::OkStatus();
  });
  return s;
}

}  // namespace

const OptionSchema<ConvertJobOptions>& ConvertOptionSchema() {
  static const OptionSchema<ConvertJobOptions> schema = Build();
  return schema;
}

}  // namespace lrkv
