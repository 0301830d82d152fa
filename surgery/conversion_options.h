// Options of a K/V conversion and their validation against a model config. No
// LibTorch, so that the CLI and the service can check requests before loading models.
#ifndef LRKV_SURGERY_CONVERSION_OPTIONS_H_
#define LRKV_SURGERY_CONVERSION_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "formats/config.h"
#include "surgery/budget_allocation.h"
#include "surgery/cache_accounting.h"

namespace lrkv {

enum class SurgeryMetric { kWeight, kActivation };
const char* SurgeryMetricName(SurgeryMetric m);
absl::StatusOr<SurgeryMetric> ParseSurgeryMetric(const std::string& name);

// The most iterations a conversion may ask of the LRKV solver.
inline constexpr int kMaxSolverIterations = 100000;

struct ConversionOptions {
  /// Target variant: lrkv, gqa, mqa or mla.
  KvVariant variant = KvVariant::kLrkv;
  /// LRKV rank r; -1 takes it from `budget`.
  int64_t rank = -1;
  /// GQA KV heads; -1 takes it from `budget`.
  int64_t kv_heads = -1;
  /// MLA latent d_c; -1 takes it from `budget`.
  int64_t latent = -1;
  /// Cache budget as a fraction of the source model's cache, used when no explicit
  /// size is given: the largest configuration within it is chosen.
  double budget = 0;
  /// Error metric of the decomposition: Frobenius (`weight`) or calibration-whitened
  /// (`activation`, needs calibration statistics).
  SurgeryMetric metric = SurgeryMetric::kWeight;
  /// RoPE handling. LRKV: `plane` restricts each head's K residual to r/2 rotation
  /// planes; `partial` keeps RoPE on `rope_planes_kept` planes carried by the shared key.
  /// MLA: `reconstruct` (exact, the latent rebuilt per position) or `partial`, decoupled
  /// RoPE (the DeepSeek layout: a RoPE-free latent plus one rotated key of
  /// 2·rope_planes_kept shared by all heads, cached beside it).
  RopeMode rope_mode = RopeMode::kReconstruct;
  /// Partial mode: planes that stay rotated; -1 = every plane for MLA, a quarter for
  /// LRKV (at least 1).
  int64_t rope_planes_kept = -1;
  /// LRKV solver: iterations at most. The solver stops earlier, converged, once an
  /// iteration lowers the objective by less than `tol` times its value.
  int max_iters = 1000;
  /// LRKV solver: the relative stopping tolerance.
  double tol = 1e-6;
  /// Whitening damping: λ = damping · trace(XᵀX/n) / d.
  double damping = 1e-3;
  /// LRKV and MLA: one size for every layer, or per-layer sizes from each layer's
  /// error curve within the same total cache (budget × the source's, or the explicit
  /// size's total).
  SizeAllocation allocation = SizeAllocation::kUniform;
  /// Per-layer sizes: what each layer's curve measures. `loss` converts one layer at a
  /// time at each candidate size and measures the calibration loss (the plan minimises
  /// the summed loss changes: layers do not weigh equally in the loss, so their
  /// reconstruction errors alone mislead); `error` sums the decomposition's objective
  /// over K and V; `auto` is `loss` when calibration text is given and the conversion
  /// can be run densely (not decoupled-RoPE MLA), `error` otherwise.
  AllocationObjective allocation_objective = AllocationObjective::kAuto;
  /// MLA with decoupled RoPE: an RMSNorm on the latent (DeepSeek-V3's
  /// kv_a_layernorm, which llama.cpp's deepseek2 and stock DeepSeek code always
  /// apply), its weight fitted on the calibration inputs when given
  /// (surgery/latent_norm_fit.h). Adds no cached element.
  bool latent_norm = false;
};

// The RoPE planes a partial-mode conversion keeps (the option, or its default); 0 in
// other modes.
int64_t RopePlanesKept(const ModelConfig& config, const ConversionOptions& options);

// The shape of `config` as the accounting sees it.
AttentionShape ShapeOf(const ModelConfig& config);

// The variants a conversion can target, "gqa, mqa, mla, lrkv".
std::string ConvertibleVariantNames();

// Checks `options` against `config` and resolves the target configuration (from the
// budget when no explicit size is given). InvalidArgument names the option and the
// valid range.
absl::StatusOr<KvConfig> ResolveTarget(const ModelConfig& config,
                                       const ConversionOptions& options);

}  // namespace lrkv

#endif  // LRKV_SURGERY_CONVERSION_OPTIONS_H_
