#include "runtime/rms_norm.h"

#include <ATen/Parallel.h>

#include <cmath>

namespace lrkv {
namespace {

bool FloatLoopApplies(const at::Tensor& x, const at::Tensor& gamma) {
  const bool grad = at::GradMode::is_enabled() &&
                    (x.requires_grad() || gamma.requires_grad());
  return !grad && x.scalar_type() == at::kFloat && x.device().is_cpu() &&
         x.dim() >= 1 && x.size(-1) > 0 && gamma.scalar_type() == at::kFloat &&
         gamma.device().is_cpu() && gamma.dim() == 1 &&
         gamma.size(0) == x.size(-1);
}

at::Tensor RmsNormFloat(const at::Tensor& x, const at::Tensor& gamma,
                        double eps) {
  const at::Tensor xc = x.contiguous(), gc = gamma.contiguous();
  at::Tensor out = at::empty_like(xc);
  const int64_t n = xc.size(-1), rows = xc.numel() / n;
  const float* in = xc.data_ptr<float>();
  const float* g = gc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const auto eps_f = static_cast<float>(eps);
  // Rows in parallel only where there are enough of them (a prefill chunk).
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / n),
                   [&](int64_t r0, int64_t r1) {
                     for (int64_t r = r0; r < r1; ++r) {
                       const float* xr = in + r * n;
                       double squares = 0;
                       for (int64_t i = 0; i < n; ++i)
                         squares += static_cast<double>(xr[i]) * xr[i];
                       const float mean = static_cast<float>(squares / n);
                       const float scale = 1.0f / std::sqrt(mean + eps_f);
                       float* orow = o + r * n;
                       for (int64_t i = 0; i < n; ++i)
                         orow[i] = (xr[i] * scale) * g[i];
                     }
                   });
  return out;
}

}  // namespace

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& gamma, double eps) {
  if (FloatLoopApplies(x, gamma)) return RmsNormFloat(x, gamma, eps);
  return x * at::rsqrt(x.pow(2).mean({-1}, /*keepdim=*/true) + eps) * gamma;
}

}  // namespace lrkv
