// The LRKV decomposition of one projection of one layer (see the header).
#include "surgery/lrkv_decomposition.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace lrkv {
namespace {

struct Fit {
  at::Tensor u;  // Ũ [H, d, r] (whitened coordinates)
  at::Tensor b;  // B [H, dh, r]
};

// Best rank-r fit of each R_h [d, dh] through the eigenvectors of R_hᵀR_h: the top-r
// right singular subspace V_r gives Ũ = R V_r, B = V_r (d_h is small, so the d_h × d_h
// eigenproblem is much cheaper than an SVD of the tall d × d_h matrix).
Fit FitFree(const at::Tensor& r_mat, int64_t rank, const at::Tensor& mask) {
  at::Tensor res = mask.defined() ? r_mat * mask : r_mat;
  auto gram = at::matmul(res.transpose(1, 2), res);
  auto [evals, evecs] = at::linalg_eigh(gram);  // ascending
  const int64_t dh = r_mat.size(2);
  auto b = evecs.narrow(2, dh - rank, rank).flip({2});
  if (mask.defined()) b = b * mask.view({1, -1, 1});
  return {at::matmul(res, b), b};
}

// Plane mode: B_h selects the coordinates of the r/2 planes with the most residual
// energy; Ũ_h is then R_h restricted to those coordinates (exact least squares).
Fit FitPlanes(const at::Tensor& r_mat, int64_t rank,
              const std::vector<std::pair<int64_t, int64_t>>& planes,
              std::vector<std::vector<int64_t>>* chosen) {
  const int64_t h = r_mat.size(0), dh = r_mat.size(2), n_planes = rank / 2;
  auto col_energy = r_mat.pow(2).sum(1);  // [H, dh]
  auto acc = col_energy.accessor<double, 2>();
  auto b = at::zeros({h, dh, rank}, at::kDouble);
  std::vector<at::Tensor> us;
  chosen->assign(h, {});
  for (int64_t head = 0; head < h; ++head) {
    std::vector<int64_t> order(planes.size());
    for (size_t p = 0; p < planes.size(); ++p) order[p] = static_cast<int64_t>(p);
    auto energy = [&](int64_t p) {
      return acc[head][planes[p].first] + acc[head][planes[p].second];
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t c) { return energy(a) > energy(c); });
    std::vector<int64_t> keep(order.begin(), order.begin() + n_planes);
    std::sort(keep.begin(), keep.end());
    std::vector<int64_t> coords;
    for (int64_t p : keep) {
      coords.push_back(planes[p].first);
      coords.push_back(planes[p].second);
    }
    for (int64_t j = 0; j < rank; ++j) b[head][coords[j]][j] = 1.0;
    us.push_back(r_mat[head].index_select(1, at::tensor(coords, at::kLong)));
    (*chosen)[head] = keep;
  }
  return {at::stack(us), b};
}

}  // namespace

absl::StatusOr<LrkvDecomposition> DecomposeLrkv(const at::Tensor& weights,
                                                const at::Tensor& whitening,
                                                const LrkvDecompositionOptions& opt) {
  if (weights.dim() != 3) {
    return absl::InvalidArgumentError("LRKV weights must be [H_kv, d, d_h]");
  }
  const int64_t h = weights.size(0), d = weights.size(1), dh = weights.size(2);
  const int64_t r = opt.rank;
  if (r < 0 || r > dh) {
    return absl::InvalidArgumentError(
        absl::StrCat("LRKV rank r=", r, " must lie in [0, ", dh, "] (the head dim)"));
  }
  if (opt.support == ResidualSupport::kRopePlanes &&
      (r % 2 != 0 || r / 2 > static_cast<int64_t>(opt.planes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plane mode needs an even rank of at most ", 2 * opt.planes.size(), ", got ", r));
  }
  at::Tensor mask;
  if (opt.support == ResidualSupport::kExcludeCoords) {
    mask = at::ones({dh}, at::kDouble);
    for (int64_t c : opt.excluded) mask[c] = 0.0;
    if (r > dh - static_cast<int64_t>(opt.excluded.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LRKV rank r=", r, " exceeds the ", dh - opt.excluded.size(),
          " position-free coordinates left in partial mode"));
    }
  }
  at::Tensor w = weights.to(at::kDouble);
  at::Tensor wt = whitening.defined() ? at::matmul(whitening.t(), w) : w;  // Lᵀ W_h

  LrkvDecomposition out;
  at::Tensor s = wt.mean(0);
  Fit fit{at::zeros({h, d, r}, at::kDouble), at::zeros({h, dh, r}, at::kDouble)};
  auto residual_error = [&]() { return wt - s - at::matmul(fit.u, fit.b.transpose(1, 2)); };
  out.objective.push_back(residual_error().pow(2).sum().item<double>());
  for (int it = 0; it < opt.max_iters && r > 0; ++it) {
    const at::Tensor rm = wt - s;
    fit = opt.support == ResidualSupport::kRopePlanes
              ? FitPlanes(rm, r, opt.planes, &out.planes_chosen)
              : FitFree(rm, r, mask);
    s = (wt - at::matmul(fit.u, fit.b.transpose(1, 2))).mean(0);
    const double obj = residual_error().pow(2).sum().item<double>();
    const double prev = out.objective.back();
    out.objective.push_back(obj);
    if (prev - obj <= opt.tol * prev) break;
  }
  const at::Tensor err = residual_error();
  const auto head_err = err.pow(2).sum({1, 2}).sqrt();
  const auto head_norm = wt.pow(2).sum({1, 2}).sqrt();
  for (int64_t i = 0; i < h; ++i) {
    const double n = head_norm[i].item<double>();
    out.head_rel_error.push_back(n > 0 ? head_err[i].item<double>() / n : 0.0);
  }
  const double energy = wt.pow(2).sum().item<double>();
  out.rel_error = energy > 0 ? std::sqrt(out.objective.back() / energy) : 0.0;
  if (whitening.defined()) {
    // Back to original coordinates: S = L⁻ᵀ S̃, U_h = L⁻ᵀ Ũ_h.
    const at::Tensor lt = whitening.t();
    out.shared = at::linalg_solve_triangular(lt, s, /*upper=*/true);
    out.down = r > 0 ? at::linalg_solve_triangular(lt, fit.u, /*upper=*/true) : fit.u;
  } else {
    out.shared = s;
    out.down = fit.u;
  }
  out.up = fit.b;
  return out;
}

}  // namespace lrkv
