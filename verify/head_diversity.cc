// Head diversity of the per-head bilinear forms (see head_diversity.h).
#include "verify/head_diversity.h"

#include <cmath>

namespace lrkv {

at::Tensor BilinearGram(const at::Tensor& wq, const at::Tensor& wk, int64_t heads,
                        int64_t kv_heads, int64_t head_dim) {
  const auto q = wq.to(at::kDouble).view({heads, head_dim, -1});     // rows: W_hQᵀ
  const auto k = wk.to(at::kDouble).view({kv_heads, head_dim, -1});  // rows: W_hKᵀ
  const int64_t group = heads / kv_heads;
  // QQ[i, j] = W_iQᵀ W_jQ and KK[a, b] = W_aKᵀ W_bK, each d_h × d_h.
  const auto qq = at::einsum("iad,jbd->ijab", {q, q});
  const auto kk = at::einsum("iad,jbd->ijab", {k, k});
  const auto kv = at::arange(heads, at::kLong).div(group, "floor");
  // KK for the query heads' KV heads, transposed pairs: KKq[i, j] = W_{kv(j)}Kᵀ W_{kv(i)}K.
  const auto kkq = kk.index_select(0, kv).index_select(1, kv).transpose(0, 1);
  // G_ij = tr(QQ[i, j] · KKq[i, j]) = Σ_ab QQ[i,j,a,b] KKq[i,j,b,a].
  return at::einsum("ijab,ijba->ij", {qq, kkq});
}

double EffectiveRank(const at::Tensor& gram, double scale) {
  const auto eig = at::linalg_eigvalsh(gram.to(at::kDouble)).clamp_min(0);
  const double total = eig.sum().item<double>();
  if (total <= 1e-12 * std::max(scale, 1e-300)) return 0.0;
  const auto p = eig / total;
  const auto nz = p.masked_select(p > 0);
  return std::exp(-(nz * nz.log()).sum().item<double>());
}

HeadDiversity MeasureHeadDiversity(const at::Tensor& gram) {
  const int64_t h = gram.size(0);
  const auto j = at::eye(h, at::kDouble) - at::full({h, h}, 1.0 / h, at::kDouble);
  const auto centred = at::matmul(at::matmul(j, gram.to(at::kDouble)), j);
  const double scale = gram.diagonal().sum().item<double>();
  return {EffectiveRank(centred, scale), EffectiveRank(gram, scale)};
}

}  // namespace lrkv
