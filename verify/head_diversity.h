// Head diversity (the paper's App. C): the Gram matrix of the per-head bilinear forms
// A_h = W_hQ W_hKᵀ (d × d), G_ij = ⟨A_i, A_j⟩_F = tr((W_iQᵀ W_jQ)(W_jKᵀ W_iK)), computed
// from d_h × d_h products only, and its entropy effective rank, centred (bounded by
// H − 1) and uncentred.
#ifndef LRKV_VERIFY_HEAD_DIVERSITY_H_
#define LRKV_VERIFY_HEAD_DIVERSITY_H_

#include <ATen/ATen.h>

#include <cstdint>

namespace lrkv {

// G [H, H] (float64) for query weights [H*d_h, d] and key weights [H_kv*d_h, d]; query
// head i uses KV head i / (H / H_kv).
at::Tensor BilinearGram(const at::Tensor& wq, const at::Tensor& wk, int64_t heads,
                        int64_t kv_heads, int64_t head_dim);

// exp(entropy of the normalised eigenvalues) of a PSD matrix; 0 for a (numerically)
// zero matrix, relative to `scale` (e.g. the uncentred trace).
double EffectiveRank(const at::Tensor& gram, double scale);

struct HeadDiversity {
  double centred = 0;    // effective rank of J G J, J = I − 11ᵀ/H
  double uncentred = 0;  // effective rank of G
};

HeadDiversity MeasureHeadDiversity(const at::Tensor& gram);

}  // namespace lrkv

#endif  // LRKV_VERIFY_HEAD_DIVERSITY_H_
