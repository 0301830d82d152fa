// The free-support LRKV step (any rank-r residual subspace per head, or one off
// some coordinates in partial mode) in the heads' Gram coordinates.
//
// S lies in the span of the whitened heads' columns W̃ = [W̃_1 … W̃_H] [k, n],
// n = H·d_h (the best S for any subspaces is Σ_h W̃_h C_h, see Step), so a
// state carries S as its coefficients C [n, d_h], S = W̃C, beside X = W̃ᵀS
// [n, d_h]: packed transposed, [Cᵀ; Xᵀ] as [2, d_h, n], linear in S as
// extrapolation needs.
// A step then reads only K = W̃ᵀW̃ [n, n], never the k-row heads: about 0.7×
// the GEMM work of forming W̃ᵀS from the heads each step (k ≥ n after the
// reduction to the heads' span), the same eigenproblems, the same points.
// Internal to surgery/lrkv_decomposition.cc.
#ifndef LRKV_SURGERY_LRKV_GRAM_STEP_H_
#define LRKV_SURGERY_LRKV_GRAM_STEP_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "surgery/lrkv_alternation.h"
#include "surgery/lrkv_decomposition.h"

namespace lrkv {

// What every step of both precisions reads of the whitened heads, in float64.
struct HeadGram {
  // `wt`: W̃ [H, k, d_h] float64.
  explicit HeadGram(const at::Tensor& wt);
  int64_t heads = 0, head_dim = 0;
  at::Tensor cols;    // W̃ [k, n]
  at::Tensor gram;    // K = W̃ᵀW̃ [n, n]
  double energy = 0;  // Σ_h‖W̃_h‖² = tr K
};

class GramStep : public AlternationStep {
 public:
  // `mask` [d_h]: partial mode's coordinates the residual may use (undefined:
  // all). `work`: the precision of the state and of every product (the
  // objectives are summed in float64). `heads` and `opt` must outlive the step.
  GramStep(const HeadGram& heads, const at::Tensor& mask,
           const LrkvDecompositionOptions& opt, at::ScalarType work);

  // The state of S = W̃C for coefficients C [n, d_h] (any float dtype), and
  // back.
  at::Tensor StateOf(const at::Tensor& coefficients) const;
  at::Tensor CoefficientsOfState(const at::Tensor& state) const;
  // Coefficients of the heads' mean, S = (1/H) Σ_h W̃_h: C_h = I/H.
  at::Tensor MeanCoefficients() const;
  // Coefficients C with W̃C = S for S [k, d_h] in the heads' span (float64; a
  // tiny ridge keeps it defined where K is singular, and S outside the span
  // is projected on it).
  at::Tensor CoefficientsOf(const at::Tensor& shared) const;
  // S = W̃C [k, d_h] float64 of a state.
  at::Tensor SharedOf(const at::Tensor& state) const;

  Point Step(const at::Tensor& from) const override;

 private:
  const HeadGram& heads_;
  const LrkvDecompositionOptions& opt_;
  const at::Tensor mask_;
  const int64_t h_, dh_, n_;
  // K in `work`; its rows by head, K_{h,:} = (K_{:,h})ᵀ [H, d_h, n]; the
  // diagonal blocks K_hh = W̃_hᵀW̃_h [H, d_h, d_h]; Σ_h K_{h,:} = (W̃ᵀ Σ_h
  // W̃_h)ᵀ [d_h, n].
  const at::Tensor gram_, head_rows_, head_grams_, row_sum_;
};

}  // namespace lrkv

#endif  // LRKV_SURGERY_LRKV_GRAM_STEP_H_
