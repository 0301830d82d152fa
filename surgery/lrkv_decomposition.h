// The LRKV decomposition of one projection (K or V) of one layer:
//   min Σ_h ‖M (W_h − S − U_h B_hᵀ)‖²_F
// over the H_kv heads, in whitened coordinates W̃ = MW (M = Lᵀ for the
// activation metric, I for the weight metric), by alternating the best residual
// subspaces B_h for S (top-r right singular vectors of W̃_h − S) with the best S
// and U_h for those subspaces (closed form), extrapolating S between steps; the
// free support runs in float32 first and finishes in float64. docs/design.md,
// "Surgery".
#ifndef LRKV_SURGERY_LRKV_DECOMPOSITION_H_
#define LRKV_SURGERY_LRKV_DECOMPOSITION_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lrkv {

// Where the residual B_h may live.
enum class ResidualSupport {
  kFree,          // any rank-r subspace of the head (general SVD)
  kRopePlanes,    // r/2 whole RoPE rotation planes (plane mode: B_h selects coordinates)
  kExcludeCoords, // any rank-r subspace that is zero on `excluded` (partial mode)
};

struct LrkvDecompositionOptions {
  /// Residual rank r per head, 0 <= r <= d_h.
  int64_t rank = 0;
  /// Accepted alternations at most (ConversionOptions sets it).
  int max_iters = 1000;
  /// Converged once the last 5 accepted steps together lowered the objective by less
  /// than 5·tol × its value.
  double tol = 1e-6;
  ResidualSupport support = ResidualSupport::kFree;
  /// kRopePlanes: the head's rotation planes as coordinate pairs.
  std::vector<std::pair<int64_t, int64_t>> planes;
  /// kExcludeCoords: coordinates the residual must not touch.
  std::vector<int64_t> excluded;
  /// Gauge weight ε: the solver minimises the objective + ε·Σ_h‖U_h‖² (see
  /// DecomposeLrkv), which keeps S and U_h from growing large and cancelling.
  double gauge = 1e-3;
  /// Warm start: S [d, d_h] of an earlier decomposition of the same weights (another
  /// rank), original coordinates; undefined starts from the mean of the heads.
  at::Tensor initial_shared;
};

struct LrkvDecomposition {
  at::Tensor shared;  // S   [d, d_h]        float64, original coordinates
  at::Tensor down;    // U   [H_kv, d, r]    float64, original coordinates
  at::Tensor up;      // B   [H_kv, d_h, r]  float64
  // Σ_h ‖M(W_h − S − U_h B_hᵀ)‖²: after initialisation (S = mean, U = 0) and after
  // each float64 iteration.
  std::vector<double> objective;
  // objective + ε·Σ_h‖Ũ_h‖², what the solver minimises: never increases.
  std::vector<double> gauged_objective;
  // ‖M(W_h − S − U_h B_hᵀ)‖ / ‖M W_h‖ per head, at the end.
  std::vector<double> head_rel_error;
  // Steps the free support's float32 run took before the float64 steps the
  // objectives record (see DecomposeLrkv); they count towards max_iters.
  int float32_steps = 0;
  // Stopped on the tolerance (or exact); false when max_iters ran out first.
  bool converged = false;
  // sqrt(final objective / Σ_h ‖M W_h‖²).
  double rel_error = 0;
  // kRopePlanes: the planes each head keeps (indices into options.planes, ascending).
  std::vector<std::vector<int64_t>> planes_chosen;
};

// `weights`: W [H_kv, d, d_h] (any float dtype). `whitening`: L [d, d] lower
// triangular, or undefined for the weight metric.
absl::StatusOr<LrkvDecomposition> DecomposeLrkv(const at::Tensor& weights,
                                                const at::Tensor& whitening,
                                                const LrkvDecompositionOptions& options);

}  // namespace lrkv

#endif  // LRKV_SURGERY_LRKV_DECOMPOSITION_H_
