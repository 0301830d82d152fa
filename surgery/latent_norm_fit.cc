// The fit of the MLA latent norm's γ (see latent_norm_fit.h).
#include "surgery/latent_norm_fit.h"

#include <cmath>

namespace lrkv {
namespace {

// γ = s̄·1 from the weights alone.
LatentNormFit FitWithoutInputs(const at::Tensor& kv_down,
                               const at::Tensor& input_scale, double eps) {
  const at::Tensor p = input_scale.defined()
                           ? kv_down * input_scale.to(at::kDouble).unsqueeze(0)
                           : kv_down;
  const int64_t dc = kv_down.size(0);
  const double mean_square =
      p.pow(2).sum().item<double>() / static_cast<double>(dc) + eps;
  LatentNormFit fit;
  fit.gamma = at::full({dc}, std::sqrt(mean_square), at::kFloat);
  return fit;
}

}  // namespace

LatentNormFit FitLatentNorm(const at::Tensor& kv_down_in,
                            const at::Tensor& up_in, const at::Tensor& inputs,
                            const at::Tensor& input_scale, double eps) {
  const at::Tensor kv_down = kv_down_in.to(at::kDouble);
  if (!inputs.defined() || inputs.size(0) == 0) {
    return FitWithoutInputs(kv_down, input_scale, eps);
  }
  const int64_t dc = kv_down.size(0);
  const at::Tensor up = up_in.to(at::kDouble);
  const at::Tensor c =
      at::matmul(inputs.to(at::kDouble), kv_down.t());         // [n, dc]
  const at::Tensor s = (c.pow(2).mean(1, true) + eps).sqrt();  // [n, 1]
  const at::Tensor a = c / s;
  const at::Tensor g = at::matmul(up.t(), up);  // [dc, dc]
  const at::Tensor lhs = g * at::matmul(a.t(), a);
  const at::Tensor rhs = (g * at::matmul(a.t(), c)).sum(1);
  // G∘A is positive semi-definite (a Schur product); a ridge of 1e-12 of its
  // mean diagonal keeps a latent dimension the inputs never reach solvable.
  const double ridge = 1e-12 * lhs.diagonal().mean().item<double>() + 1e-300;
  const at::Tensor gamma =
      at::linalg_solve(lhs + ridge * at::eye(dc, at::kDouble), rhs.unsqueeze(1))
          .squeeze(1);
  // Residual and reference through U, summed over tokens: tr(R G Rᵀ).
  const at::Tensor r = c - a * gamma.unsqueeze(0);
  const double err = (at::matmul(r, g) * r).sum().item<double>(),
               ref = (at::matmul(c, g) * c).sum().item<double>();
  LatentNormFit fit;
  fit.gamma = gamma.to(at::kFloat);
  fit.rel_error = ref > 0 ? std::sqrt(err / ref) : 0.0;
  fit.samples = inputs.size(0);
  return fit;
}

}  // namespace lrkv
