// Baseline conversions: GQA/MQA mean pooling and the MLA joint latent (see header).
#include "surgery/baselines.h"

namespace lrkv {

at::Tensor PoolKvHeads(const ModelConfig& c, const at::Tensor& per_head, int64_t n_kv) {
  const int64_t h = c.num_heads, src_group = h / c.num_kv_heads, dst_group = h / n_kv;
  auto src = per_head.reshape({c.num_kv_heads, c.head_dim, -1});
  std::vector<at::Tensor> pooled;
  for (int64_t j = 0; j < n_kv; ++j) {
    at::Tensor sum = at::zeros_like(src[0]);
    for (int64_t q = j * dst_group; q < (j + 1) * dst_group; ++q) {
      sum = sum + src[q / src_group];
    }
    pooled.push_back(sum / static_cast<double>(dst_group));
  }
  auto shape = per_head.sizes().vec();
  shape[0] = n_kv * c.head_dim;
  return at::stack(pooled).reshape(shape).contiguous();
}

double RelativeError(const at::Tensor& a, const at::Tensor& b,
                     const at::Tensor& whitening) {
  auto diff = (a - b).to(at::kDouble).t();  // [d, out]
  auto ref = a.to(at::kDouble).t();
  if (whitening.defined()) {
    diff = at::matmul(whitening.t(), diff);
    ref = at::matmul(whitening.t(), ref);
  }
  const double n = ref.norm().item<double>();
  return n > 0 ? diff.norm().item<double>() / n : 0.0;
}

std::vector<double> MlaErrorCurve(const at::Tensor& wk, const at::Tensor& wv,
                                  const at::Tensor& whitening) {
  auto joint = at::cat({wk, wv}, 0).to(at::kDouble).t();  // [d, 2*kv]
  auto wt = whitening.defined() ? at::matmul(whitening.t(), joint) : joint;
  const at::Tensor sv = at::linalg_svdvals(wt).pow(2).contiguous();
  auto acc = sv.accessor<double, 1>();
  std::vector<double> curve(joint.size(1) + 1, 0.0);
  for (int64_t i = sv.size(0) - 1; i >= 0; --i) {
    curve[i] = curve[i + 1] + acc[i];  // curve[k] = Σ_{j >= k} σ_j²
  }
  return curve;
}

MlaFactors FactorizeMla(const at::Tensor& wk, const at::Tensor& wv,
                        const at::Tensor& whitening, int64_t latent) {
  const int64_t kv = wk.size(0);
  auto joint = at::cat({wk, wv}, 0).to(at::kDouble).t();  // [d, 2*kv]
  auto wt = whitening.defined() ? at::matmul(whitening.t(), joint) : joint;
  auto [u, s, vh] = at::linalg_svd(wt, /*full_matrices=*/false);
  auto p = u.narrow(1, 0, latent);                                      // [d, dc]
  auto up = s.narrow(0, 0, latent).unsqueeze(1) * vh.narrow(0, 0, latent);  // [dc, 2kv]
  auto down = whitening.defined()
                  ? at::linalg_solve_triangular(whitening.t(), p, /*upper=*/true)
                  : p;
  MlaFactors f;
  f.kv_down = down.t().contiguous().to(at::kFloat);
  f.k_up = up.narrow(1, 0, kv).t().contiguous().to(at::kFloat);
  f.v_up = up.narrow(1, kv, kv).t().contiguous().to(at::kFloat);
  const auto k_hat = at::matmul(f.k_up, f.kv_down), v_hat = at::matmul(f.v_up, f.kv_down);
  f.k_rel_error = RelativeError(wk, k_hat, whitening);
  f.v_rel_error = RelativeError(wv, v_hat, whitening);
  f.rel_error = RelativeError(at::cat({wk, wv}, 0), at::cat({k_hat, v_hat}, 0), whitening);
  return f;
}

}  // namespace lrkv
