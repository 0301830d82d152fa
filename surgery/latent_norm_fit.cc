// The fit of the MLA latent norm: basis, γ and up-projection refit, chosen on
// held-out samples (see latent_norm_fit.h).
#include "surgery/latent_norm_fit.h"

#include <cmath>
#include <tuple>

namespace lrkv {
namespace {

using at::Tensor;

// A change of the latent's basis: c' = r·c, so kv_down' = r·kv_down and
// up' = up·r_inv.
struct Basis {
  Tensor r, r_inv;
};

// Σ^{-1/2} and Σ^{1/2} of a symmetric positive semi-definite Σ (float64), its
// eigenvalues floored at 1e-4 of the largest: a direction the samples barely
// reach is not blown up by what they happen to show of it.
Basis Whitening(const Tensor& sigma) {
  Tensor values, vectors;
  std::tie(values, vectors) = at::linalg_eigh(sigma);
  const double floor = 1e-4 * values.max().item<double>() + 1e-300;
  const Tensor e = values.clamp_min(floor);
  return {at::matmul(vectors * e.rsqrt().unsqueeze(0), vectors.t()),
          at::matmul(vectors * e.sqrt().unsqueeze(0), vectors.t())};
}

Basis Identity(int64_t dc) {
  const Tensor eye = at::eye(dc, at::kDouble);
  return {eye, eye};
}

// c / sqrt(mean(c²) + ε) per row: the norm without its weight.
Tensor Normalised(const Tensor& c, double eps) {
  return c / (c.pow(2).mean(1, true) + eps).sqrt();
}

// Σ_t r_tᵀ G r_t over the rows of r [n, d_c]: a latent residual's energy
// through the up-projections (G = UᵀU).
double EnergyThroughUp(const Tensor& r, const Tensor& g) {
  return (at::matmul(r, g) * r).sum().item<double>();
}

// γ = argmin Σ_t ‖U (c_t − γ ⊙ a_t)‖² for latents c and a = c / s.
Tensor FitGamma(const Tensor& c, const Tensor& a, const Tensor& g) {
  const Tensor lhs = g * at::matmul(a.t(), a);
  const Tensor rhs = (g * at::matmul(a.t(), c)).sum(1);
  // G∘A is positive semi-definite (a Schur product); a ridge of 1e-12 of its
  // mean diagonal keeps a latent dimension the inputs never reach solvable.
  const double ridge = 1e-12 * lhs.diagonal().mean().item<double>() + 1e-300;
  return at::linalg_solve(lhs + ridge * at::eye(c.size(1), at::kDouble),
                          rhs.unsqueeze(1))
      .squeeze(1);
}

// Mᵀ = argmin Σ_t ‖c_t − M n_t‖² + λ‖M − I‖², λ = rho · mean diag(Σ n nᵀ).
Tensor RefitMapT(const Tensor& c, const Tensor& normed, double rho) {
  const Tensor nn = at::matmul(normed.t(), normed);
  const double ridge = rho * nn.diagonal().mean().item<double>() + 1e-300;
  const Tensor eye = at::eye(c.size(1), at::kDouble);
  return at::linalg_solve(nn + ridge * eye,
                          at::matmul(normed.t(), c) + ridge * eye);
}

// The ridges (relative) the refit tries; no refit is the other candidate.
constexpr double kRefitRidges[] = {1e-4, 1e-3, 1e-2, 1e-1, 1.0};

// One candidate: a basis, γ fitted on the fit rows, and optionally the refit.
struct Candidate {
  Basis basis;
  bool whitened = false;
  Tensor gamma, map_t;    // map_t undefined: no refit
  double held_out = 0.0;  // Σ‖U(c − M(γ⊙a))‖² over the held-out rows
  double gamma_only_held_out = 0.0;  // the same with M = I
};

// The best candidate of one basis on (fit, held-out) latents given in the
// factorisation's basis; g = UᵀU there.
Candidate BestInBasis(const Basis& b, bool whitened, const Tensor& fit_c,
                      const Tensor& held_c, const Tensor& g, double eps) {
  const Tensor fc = at::matmul(fit_c, b.r.t()),
               hc = at::matmul(held_c, b.r.t());
  const Tensor gb = at::matmul(at::matmul(b.r_inv.t(), g), b.r_inv);
  Candidate best;
  best.basis = b;
  best.whitened = whitened;
  const Tensor fit_a = Normalised(fc, eps);
  best.gamma = FitGamma(fc, fit_a, gb);
  const Tensor g1 = best.gamma.unsqueeze(0);
  const Tensor fit_n = fit_a * g1, held_n = Normalised(hc, eps) * g1;
  best.held_out = best.gamma_only_held_out = EnergyThroughUp(hc - held_n, gb);
  for (double rho : kRefitRidges) {
    const Tensor m_t = RefitMapT(fc, fit_n, rho);
    const double e = EnergyThroughUp(hc - at::matmul(held_n, m_t), gb);
    if (e < best.held_out) {
      best.held_out = e;
      best.map_t = m_t;
    }
  }
  return best;
}

// The data-free rule: the isotropic-input whitening and γ = s̄·1.
LatentNormFit FitWithoutInputs(const Tensor& kv_down, const Tensor& up,
                               const Tensor& input_scale, double eps) {
  const Tensor p = input_scale.defined()
                       ? kv_down * input_scale.to(at::kDouble).unsqueeze(0)
                       : kv_down;
  const Basis b = Whitening(at::matmul(p, p.t()));
  const int64_t dc = kv_down.size(0);
  const double mean_square =
      at::matmul(b.r, p).pow(2).sum().item<double>() / static_cast<double>(dc) +
      eps;
  LatentNormFit fit;
  fit.kv_down = at::matmul(b.r, kv_down).to(at::kFloat);
  fit.up = at::matmul(up, b.r_inv).to(at::kFloat);
  fit.gamma = at::full({dc}, std::sqrt(mean_square), at::kFloat);
  fit.whitened = true;
  return fit;
}

}  // namespace

LatentNormFit FitLatentNorm(const Tensor& kv_down_in, const Tensor& up_in,
                            const Tensor& inputs, const Tensor& input_scale,
                            double eps) {
  const Tensor kv_down = kv_down_in.to(at::kDouble);
  const Tensor up = up_in.to(at::kDouble);
  if (!inputs.defined() || inputs.size(0) == 0) {
    return FitWithoutInputs(kv_down, up, input_scale, eps);
  }
  const int64_t n = inputs.size(0), dc = kv_down.size(0);
  const Tensor c = at::matmul(inputs.to(at::kDouble), kv_down.t());  // [n, dc]
  // Every fourth sample is held out: the candidates are fitted on the rest
  // and judged, and the error reported, on samples they did not see.
  const bool split = n >= 8;
  const Tensor rows = at::arange(n, at::kLong);
  const Tensor fit_c = split ? c.index({rows % 4 != 3}) : c;
  const Tensor held_c = split ? c.index({rows % 4 == 3}) : c;
  const Tensor g = at::matmul(up.t(), up);
  const Candidate plain =
      BestInBasis(Identity(dc), false, fit_c, held_c, g, eps);
  const Candidate white =
      BestInBasis(Whitening(at::matmul(fit_c.t(), fit_c) /
                            static_cast<double>(fit_c.size(0))),
                  true, fit_c, held_c, g, eps);
  const Candidate& best = white.held_out < plain.held_out ? white : plain;
  // The factorisation's basis with γ alone: what the two other freedoms buy.
  const double plain_held = plain.gamma_only_held_out;
  const double reference = EnergyThroughUp(held_c, g);
  Tensor up_out = at::matmul(up, best.basis.r_inv);
  if (best.map_t.defined()) up_out = at::matmul(up_out, best.map_t.t());
  LatentNormFit fit;
  fit.kv_down = at::matmul(best.basis.r, kv_down).to(at::kFloat);
  fit.up = up_out.to(at::kFloat);
  fit.gamma = best.gamma.to(at::kFloat);
  fit.whitened = best.whitened;
  fit.refitted = best.map_t.defined();
  fit.rel_error = reference > 0 ? std::sqrt(best.held_out / reference) : 0.0;
  fit.plain_rel_error = reference > 0 ? std::sqrt(plain_held / reference) : 0.0;
  fit.samples = n;
  return fit;
}

}  // namespace lrkv
