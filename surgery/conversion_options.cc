// Options of a K/V conversion and their validation (see conversion_options.h).
#include "surgery/conversion_options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

}  // namespace

const char* SurgeryMetricName(SurgeryMetric m) {
  return m == SurgeryMetric::kWeight ? "weight" : "activation";
}

absl::StatusOr<SurgeryMetric> ParseSurgeryMetric(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "weight") return SurgeryMetric::kWeight;
  if (lower == "activation") return SurgeryMetric::kActivation;
  return Invalid(
      absl::StrCat("unknown metric '", name, "'; valid: weight, activation"));
}

AttentionShape ShapeOf(const ModelConfig& c) {
  AttentionShape s;
  s.layers = c.num_layers;
  s.hidden = c.hidden_size;
  s.heads = c.num_heads;
  s.kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.qk_norm = c.qk_norm;
  s.qk_norm_over_heads = c.qk_norm_over_heads;
  return s;
}

int64_t RopePlanesKept(const ModelConfig& c, const ConversionOptions& o) {
  if (o.rope_mode != RopeMode::kPartial) return 0;
  if (o.rope_planes_kept >= 0) return o.rope_planes_kept;
  // MLA's rotated key is shared by every head, so a plane costs it 2 cached
  // elements in all: every plane by default (stories260K at 50 %:
  // perplexity 5.30 keeping all 4, 76.9 keeping 2, scripts/surgery_table.sh).
  // LRKV's partial RoPE takes its kept planes from every head's residual: a
  // quarter.
  const int64_t planes = c.rope_dim / 2;
  return o.variant == KvVariant::kMla ? planes
                                      : std::max<int64_t>(1, planes / 4);
}

namespace {

// The RoPE mode against the variant and the model.
absl::Status CheckRopeMode(const ModelConfig& c, const ConversionOptions& o) {
  const bool mla_partial =
      o.variant == KvVariant::kMla && o.rope_mode == RopeMode::kPartial;
  if (o.rope_mode == RopeMode::kSharedPlane) {
    if (o.variant != KvVariant::kLrkv) {
      return Invalid("--rope-mode shared-plane applies to lrkv only");
    }
    if (c.qk_norm || c.qkv_bias) {
      return Invalid(
          absl::StrCat("--rope-mode shared-plane: models with ",
                       c.qk_norm ? "QK-norm" : "attention biases",
                       " are not supported (use plane or reconstruct)"));
    }
    if (o.allocation == SizeAllocation::kLayers) {
      return Invalid(
          "--rope-mode shared-plane uses one rank for every layer "
          "(--allocation uniform)");
    }
    if (o.rank >= 0 && (c.num_kv_heads * o.rank) % 2 != 0) {
      return Invalid(
          absl::StrCat("--rope-mode shared-plane needs H_kv·r even (",
                       c.num_kv_heads, " KV heads, r = ", o.rank, ")"));
    }
  }
  if (o.variant != KvVariant::kLrkv && o.rope_mode != RopeMode::kReconstruct &&
      !mla_partial) {
    return Invalid(absl::StrCat(
        "--rope-mode ", RopeModeName(o.rope_mode),
        o.variant == KvVariant::kMla
            ? " does not apply to mla (valid: reconstruct, partial)"
            : absl::StrCat(o.rope_mode == RopeMode::kPartial
                               ? " applies to lrkv and mla only; "
                               : " applies to lrkv only; ",
                           KvVariantName(o.variant),
                           " keeps exact RoPE (reconstruct)")));
  }
  if (mla_partial) {
    if (c.qk_norm) {
      return Invalid(
          "mla --rope-mode partial (decoupled RoPE, the DeepSeek layout) needs "
          "a model "
          "without QK-norm: that layout normalises no key (use --rope-mode "
          "reconstruct)");
    }
    if (c.rope_scaling.attention_factor != 1.0) {
      return Invalid(
          "mla --rope-mode partial: the model's rope_scaling scales rotated "
          "dims by an "
          "attention factor, which the RoPE-free part would lose (use "
          "--rope-mode "
          "reconstruct)");
    }
    if (c.rope_dim == 0) {
      return Invalid(
          "mla --rope-mode partial: the model has no RoPE (use reconstruct)");
    }
  }
  return absl::OkStatus();
}

// The solver's iterations and tolerance, and the whitening's damping.
absl::Status CheckSolverOptions(const ConversionOptions& o) {
  if (o.max_iters < 1 || o.max_iters > kMaxSolverIterations) {
    return Invalid(absl::StrCat("iterations ", o.max_iters, " must lie in [1, ",
                                kMaxSolverIterations, "]"));
  }
  if (!(o.tol >= 0) || o.tol >= 1) {
    return Invalid(absl::StrCat("tolerance ", o.tol, " must lie in [0, 1)"));
  }
  if (!(o.damping > 0) || o.damping > 1) {
    return Invalid(absl::StrCat("damping ", o.damping, " must lie in (0, 1]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KvConfig> ResolveTarget(const ModelConfig& c,
                                       const ConversionOptions& o) {
  if (c.kv.layout != KvLayout::kDense) {
    return Invalid(absl::StrCat("the source is already converted (",
                                KvLayoutName(c.kv.layout),
                                " K/V); convert a dense MHA/GQA checkpoint"));
  }
  const AttentionShape shape = ShapeOf(c);
  const bool by_budget = o.budget > 0;
  KvConfig target;
  target.variant = o.variant;
  // Shared-plane: H_kv·r/2 shared latent planes, so H_kv·r must be even.
  const bool plane =
      o.rope_mode == RopeMode::kPlane ||
      (o.rope_mode == RopeMode::kSharedPlane && c.num_kv_heads % 2 != 0);
  const bool mla_partial =
      o.variant == KvVariant::kMla && o.rope_mode == RopeMode::kPartial;
  RETURN_IF_ERROR(CheckRopeMode(c, o));
  if (o.latent_norm && !mla_partial) {
    return Invalid(
        "--latent-norm is the RMSNorm of DeepSeek's MLA latent: it applies to "
        "--variant mla --rope-mode partial only");
  }
  const int64_t rope_width = mla_partial ? 2 * RopePlanesKept(c, o) : 0;
  if (o.variant == KvVariant::kMha) {
    return Invalid(
        "variant mha is the source itself; valid targets: lrkv, gqa, mqa, mla");
  }
  if (o.rank < -1 || o.kv_heads < -1 || o.latent < -1) {
    return Invalid(absl::StrCat(
        "--rank, --kv-heads and --latent must not be negative (got ", o.rank,
        ", ", o.kv_heads, ", ", o.latent, ")"));
  }
  if (by_budget) {
    if (o.rank >= 0 || o.kv_heads >= 0 || o.latent >= 0) {
      return Invalid(
          "give either --budget or an explicit size (--rank, --kv-heads, "
          "--latent), not both");
    }
    ASSIGN_OR_RETURN(
        target, PlanForBudget(shape, o.variant, o.budget, plane, rope_width));
  } else {
    switch (o.variant) {
      case KvVariant::kLrkv:
        if (o.rank < 0) return Invalid("lrkv needs --rank r or --budget");
        target.rank = o.rank;
        target.even_rank = plane;
        break;
      case KvVariant::kGqa:
        if (o.kv_heads < 0)
          return Invalid("gqa needs --kv-heads n or --budget");
        target.kv_heads = o.kv_heads;
        break;
      case KvVariant::kMla:
        if (o.latent < 0) return Invalid("mla needs --latent d_c or --budget");
        target.latent = o.latent;
        target.rope_dim = rope_width;
        break;
      case KvVariant::kMqa:
        break;
      case KvVariant::kMha:
        return Invalid(
            "variant mha is the source itself; valid targets: lrkv, gqa, mqa, "
            "mla");
    }
    RETURN_IF_ERROR(ValidateKvConfig(shape, target));
  }
  if (o.allocation == SizeAllocation::kLayers &&
      target.variant != KvVariant::kLrkv && target.variant != KvVariant::kMla) {
    return Invalid(absl::StrCat(
        "--allocation layers sizes LRKV ranks or MLA latents per "
        "layer; ",
        KvVariantName(target.variant),
        " has one size for every layer (use --allocation uniform)"));
  }
  if (o.allocation == SizeAllocation::kLayers &&
      o.allocation_objective == AllocationObjective::kLoss &&
      target.variant == KvVariant::kMla && o.rope_mode == RopeMode::kPartial) {
    return Invalid(
        "--allocation-objective loss probes each layer as a dense one; "
        "decoupled-RoPE "
        "MLA's keys (d_h + d_rope) have no dense form (use "
        "--allocation-objective "
        "error)");
  }
  if (o.rope_mode == RopeMode::kPartial) {
    const int64_t kept = o.rope_planes_kept;
    if (kept > c.rope_dim / 2 || kept < -1) {
      return Invalid(absl::StrCat("--rope-planes ", kept, " must lie in [0, ",
                                  c.rope_dim / 2,
                                  "] (the RoPE planes of a head)"));
    }
  }
  RETURN_IF_ERROR(CheckSolverOptions(o));
  return target;
}

}  // namespace lrkv
