// Options of a K/V conversion and their validation (see conversion_options.h).
#include "surgery/conversion_options.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "surgery/kv_variant.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

}  // namespace

std::string ConvertibleVariantNames() {
  std::vector<std::string> names;
  for (const KvVariantType* t : AllKvVariantTypes()) {
    if (t->convertible()) names.push_back(t->name());
  }
  return absl::StrJoin(names, ", ");
}

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
  if (!RopeModeTraitsOf(o.rope_mode).keeps_some_planes) return 0;
  if (o.rope_planes_kept >= 0) return o.rope_planes_kept;
  return KvVariantTypeOf(o.variant).DefaultPlanesKept(c.rope_dim / 2);
}

namespace {

// The RoPE mode against the variant and the model.
absl::Status CheckRopeMode(const ModelConfig& c, const ConversionOptions& o) {
  const KvVariantType& variant = KvVariantTypeOf(o.variant);
  const std::vector<RopeMode> own = variant.rope_modes();
  if (std::find(own.begin(), own.end(), o.rope_mode) == own.end()) {
    std::vector<std::string> takers, names;
    for (const KvVariantType* t : AllKvVariantTypes()) {
      const std::vector<RopeMode> modes = t->rope_modes();
      if (std::find(modes.begin(), modes.end(), o.rope_mode) != modes.end()) {
        takers.push_back(t->name());
      }
    }
    for (RopeMode m : own) names.push_back(RopeModeName(m));
    return Invalid(absl::StrCat(
        "--rope-mode ", RopeModeName(o.rope_mode), " applies to ",
        absl::StrJoin(takers, " and "), " only; ", variant.name(),
        own.size() == 1 ? " keeps exact RoPE (reconstruct)"
                        : absl::StrCat(" takes ", absl::StrJoin(names, ", "))));
  }
  RETURN_IF_ERROR(variant.CheckConversion(c, o));
  if (o.latent_norm && !variant.CachesRopeDims(o.rope_mode)) {
    return Invalid(
        "--latent-norm is the RMSNorm of DeepSeek's MLA latent: it applies to "
        "--variant mla --rope-mode partial only");
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
  if (c.kv.Factored()) {
    return Invalid(absl::StrCat("the source is already converted (",
                                KvLayoutName(c.kv.layout),
                                " K/V); convert a dense MHA/GQA checkpoint"));
  }
  const KvVariantType& variant = KvVariantTypeOf(o.variant);
  if (!variant.convertible()) {
    return Invalid(absl::StrCat(
        "variant ", variant.name(),
        " is the source itself; valid targets: ", ConvertibleVariantNames()));
  }
  const AttentionShape shape = ShapeOf(c);
  RETURN_IF_ERROR(CheckRopeMode(c, o));
  if (o.rank < -1 || o.kv_heads < -1 || o.latent < -1) {
    return Invalid(absl::StrCat(
        "--rank, --kv-heads and --latent must not be negative (got ", o.rank,
        ", ", o.kv_heads, ", ", o.latent, ")"));
  }
  KvConfig target;
  target.variant = o.variant;
  variant.PrepareTarget(c, o, &target);
  if (o.budget > 0) {
    if (o.rank >= 0 || o.kv_heads >= 0 || o.latent >= 0) {
      return Invalid(
          "give either --budget or an explicit size (--rank, --kv-heads, "
          "--latent), not both");
    }
    ASSIGN_OR_RETURN(target, PlanForBudget(shape, target, o.budget));
  } else {
    RETURN_IF_ERROR(variant.SetExplicitSize(o, &target));
    RETURN_IF_ERROR(ValidateKvConfig(shape, target));
  }
  if (o.allocation == SizeAllocation::kLayers && !variant.allocatable()) {
    return Invalid(absl::StrCat(
        "--allocation layers sizes LRKV ranks or MLA latents per "
        "layer; ",
        variant.name(),
        " has one size for every layer (use --allocation uniform)"));
  }
  if (RopeModeTraitsOf(o.rope_mode).keeps_some_planes) {
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
