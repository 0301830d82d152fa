// LRKV's key residual in shared-plane form: instead of each KV head keeping r/2 of its
// own RoPE planes (plane mode), the heads share m = H_kv·r/2 latent planes (the same
// cache), each tied to one RoPE plane f_j, and head h reads shared plane j through a
// complex factor c_{h,j} (a turn and a scale of the 2-D plane, which commutes with
// RoPE):   k_h = S x + Σ_j E_{f_j} c_{h,j} (s_j · x)   (s_j a complex row, E_f the
// embedding into plane f's coordinates). So the latents are rotated once, at write
// time, with their planes' frequencies, and each head's query absorbs conj(c_{h,j}):
// exact, O(L·(d_h + 2m)) per head and step. The TransMLA RoRoPE observation, applied to
// the residual: per plane, the best shared directions are the top complex principal
// directions across the heads, and the m best (plane, direction) pairs are kept.
#ifndef LRKV_SURGERY_SHARED_PLANE_H_
#define LRKV_SURGERY_SHARED_PLANE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/llama_weights.h"

namespace lrkv {

struct SharedPlaneDecomposition {
  /// shared [d_h, d], down [2m, d] (pair j = Re, Im of s_j), up [H_kv, d_h, 2m]
  /// (head h's block on plane f_j's coordinates is [[Re c, −Im c], [Im c, Re c]]).
  LowRankProjection projection;
  /// The RoPE plane (index into the head planes) of each shared latent pair.
  std::vector<int64_t> planes;
  /// Σ_h ‖M(W_h − Ŵ_h)‖² after initialisation and each alternation (never increases).
  std::vector<double> objective;
  std::vector<double> head_rel_error;
  double rel_error = 0;
  bool converged = false;
};

// `weights`: W [H_kv, d, d_h]; `whitening`: L [d, d] or undefined; `planes`: the head's
// coordinate pairs (every RoPE plane, then the position-free pairs); `pairs` = m.
// Alternates the shared key S (the heads' mean less their fitted residual) with the
// best m shared planes for W − S, at most `max_iters` times, converged when 5 steps
// together gain less than 5·tol of the objective.
absl::StatusOr<SharedPlaneDecomposition> DecomposeSharedPlanes(
    const at::Tensor& weights, const at::Tensor& whitening,
    const std::vector<std::pair<int64_t, int64_t>>& planes, int64_t pairs, int max_iters,
    double tol);

}  // namespace lrkv

#endif  // LRKV_SURGERY_SHARED_PLANE_H_
