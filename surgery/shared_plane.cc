// The shared-plane key residual of LRKV (see header).
#include "surgery/shared_plane.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "surgery/complex_planes.h"

namespace lrkv {
namespace {

// One shared latent plane: RoPE plane `plane` and the heads' unit complex direction.
struct Pick {
  int64_t plane;
  PlaneDirection u;
};

// The best `pairs` shared planes for the whitened residual R [H_kv, d, d_h]: per plane,
// the heads' complex principal directions (complex_planes.h); the m largest energies
// over all planes are kept.
std::vector<Pick> BestPlanes(const at::Tensor& r,
                             const std::vector<std::pair<int64_t, int64_t>>& planes,
                             int64_t pairs) {
  std::vector<Pick> all;
  for (size_t f = 0; f < planes.size(); ++f) {
    double trace = 0;
    for (PlaneDirection& u : PlaneDirections(r.select(2, planes[f].first),
                                             r.select(2, planes[f].second), &trace)) {
      all.push_back({static_cast<int64_t>(f), std::move(u)});
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Pick& x, const Pick& y) { return x.u.energy > y.u.energy; });
  all.resize(static_cast<size_t>(std::min<int64_t>(pairs, static_cast<int64_t>(all.size()))));
  return all;
}

// s = Σ_h conj(u_h) w_h of pick p on R: (Re s, Im s), each [d].
std::pair<at::Tensor, at::Tensor> SharedRow(const at::Tensor& r, const Pick& p,
                                            const std::pair<int64_t, int64_t>& coords) {
  return MixPlane(p.u, r.select(2, coords.first), r.select(2, coords.second));
}

// The fitted residual of `picks` on R.
at::Tensor Fit(const at::Tensor& r, const std::vector<Pick>& picks,
               const std::vector<std::pair<int64_t, int64_t>>& planes) {
  auto fit = at::zeros_like(r);
  for (const Pick& p : picks) {
    const auto coords = planes[p.plane];
    const auto [sr, si] = SharedRow(r, p, coords);
    const auto [fa, fb] = SpreadPlane(p.u, sr, si);
    fit.select(2, coords.first).add_(fa);
    fit.select(2, coords.second).add_(fb);
  }
  return fit;
}

}  // namespace

absl::StatusOr<SharedPlaneDecomposition> DecomposeSharedPlanes(
    const at::Tensor& weights, const at::Tensor& whitening,
    const std::vector<std::pair<int64_t, int64_t>>& planes, int64_t pairs, int max_iters,
    double tol) {
  const int64_t hkv = weights.size(0), d = weights.size(1), dh = weights.size(2);
  if (pairs < 0 || pairs > hkv * static_cast<int64_t>(planes.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared planes ", pairs, " must lie in [0, ", hkv * static_cast<int64_t>(planes.size()),
        "] (H_kv x the head's planes)"));
  }
  const auto f64 = at::kDouble;
  const at::Tensor L = whitening.defined() ? whitening.to(f64) : at::Tensor();
  auto wt = weights.to(f64);
  if (L.defined()) wt = at::matmul(L.t().unsqueeze(0), wt);  // W̃_h = Lᵀ W_h
  const double norm2 = wt.pow(2).sum().item<double>();
  SharedPlaneDecomposition out;
  auto s = wt.mean(0);  // [d, dh]
  std::vector<Pick> picks;
  at::Tensor fit;
  int quiet = 0;
  for (int it = 0; it <= max_iters; ++it) {
    const auto r = wt - s.unsqueeze(0);
    picks = BestPlanes(r, planes, pairs);
    fit = Fit(r, picks, planes);
    const double obj = (r - fit).pow(2).sum().item<double>();
    if (!out.objective.empty()) {
      const double gain = out.objective.back() - obj;
      quiet = gain < tol * obj ? quiet + 1 : 0;
    }
    out.objective.push_back(obj);
    if (quiet >= 5 || obj <= 1e-30 * std::max(norm2, 1e-300)) {
      out.converged = true;
      break;
    }
    if (it == max_iters) break;
    s = (wt - fit).mean(0);  // the best S for this residual fit
  }
  const auto r = wt - s.unsqueeze(0);
  const auto err = (r - fit).pow(2).sum({1, 2});
  const auto head_norm = wt.pow(2).sum({1, 2});
  for (int64_t h = 0; h < hkv; ++h) {
    const double n = head_norm[h].item<double>();
    out.head_rel_error.push_back(n > 0 ? std::sqrt(err[h].item<double>() / n) : 0.0);
  }
  out.rel_error = norm2 > 0 ? std::sqrt(out.objective.back() / norm2) : 0.0;
  // Back to original coordinates: S = L⁻ᵀ S̃ and each shared row likewise.
  auto unwhiten = [&](const at::Tensor& x) {  // x [d, n]
    return L.defined() ? at::linalg_solve_triangular(L.t(), x, /*upper=*/true) : x;
  };
  const int64_t m = static_cast<int64_t>(picks.size());
  auto rows = at::zeros({d, 2 * m}, f64);
  auto up = at::zeros({hkv, dh, 2 * m}, f64);
  for (int64_t j = 0; j < m; ++j) {
    const Pick& p = picks[j];
    const auto coords = planes[p.plane];
    const auto [sr, si] = SharedRow(r, p, coords);
    rows.select(1, 2 * j).copy_(sr);
    rows.select(1, 2 * j + 1).copy_(si);
    up.select(1, coords.first).select(1, 2 * j).copy_(p.u.re);
    up.select(1, coords.first).select(1, 2 * j + 1).copy_(-p.u.im);
    up.select(1, coords.second).select(1, 2 * j).copy_(p.u.im);
    up.select(1, coords.second).select(1, 2 * j + 1).copy_(p.u.re);
    out.planes.push_back(p.plane);
  }
  out.projection.shared = unwhiten(s).t().contiguous().to(at::kFloat);
  out.projection.down = unwhiten(rows).t().contiguous().to(at::kFloat);
  out.projection.up = up.to(at::kFloat);
  return out;
}

}  // namespace lrkv
