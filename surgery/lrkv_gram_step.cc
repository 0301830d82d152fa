// The free-support LRKV step in the heads' Gram coordinates (see the header).
#include "surgery/lrkv_gram_step.h"

#include <algorithm>

namespace lrkv {
namespace {

// The top-r eigenvectors of each residual Gram G_h = (W̃_h − S)ᵀ(W̃_h − S)
// [H, d_h, d_h]: the best rank-r right singular subspace of W̃_h − S (d_h is
// small, so the d_h × d_h eigenproblem is much cheaper than an SVD of the tall
// k × d_h matrix). `mask` zeroes the coordinates the residual must avoid.
at::Tensor FreeSubspaces(const at::Tensor& gram, int64_t rank,
                         const at::Tensor& mask) {
  const at::Tensor g =
      mask.defined() ? gram * mask.view({1, -1, 1}) * mask.view({1, 1, -1})
                     : gram;
  auto [evals, evecs] = at::linalg_eigh(g);  // ascending
  const int64_t dh = gram.size(2);
  at::Tensor b = evecs.narrow(2, dh - rank, rank).flip({2});
  if (mask.defined()) b = b * mask.view({1, -1, 1});
  return b;
}

// (M + Mᵀ)/2: products that are symmetric in exact arithmetic, made so.
at::Tensor Symmetric(const at::Tensor& m) { return 0.5 * (m + m.t()); }

// Σ of a tensor's entries, accumulated in float64.
double Sum(const at::Tensor& t) { return t.sum(at::kDouble).item<double>(); }

}  // namespace

HeadGram::HeadGram(const at::Tensor& wt)
    : heads(wt.size(0)),
      head_dim(wt.size(2)),
      cols(wt.permute({1, 0, 2}).reshape({wt.size(1), heads * head_dim})),
      gram(at::matmul(cols.t(), cols)),
      energy(gram.trace().item<double>()) {}

GramStep::GramStep(const HeadGram& heads, const at::Tensor& mask,
                   const LrkvDecompositionOptions& opt, at::ScalarType work)
    : heads_(heads),
      opt_(opt),
      mask_(mask.defined() ? mask.to(work) : mask),
      h_(heads.heads),
      dh_(heads.head_dim),
      n_(h_ * dh_),
      gram_(heads.gram.to(work)),
      head_rows_(gram_.view({h_, dh_, n_})),
      head_grams_(at::stack(at::TensorList(std::vector<at::Tensor>([&] {
        std::vector<at::Tensor> blocks;
        for (int64_t i = 0; i < h_; ++i)
          blocks.push_back(head_rows_[i].narrow(1, i * dh_, dh_));
        return blocks;
      }())))),
      row_sum_(head_rows_.sum(0)) {}

at::Tensor GramStep::StateOf(const at::Tensor& coefficients) const {
  const at::Tensor ct = coefficients.to(gram_.scalar_type()).t();
  return at::stack({ct, at::matmul(ct, gram_)});  // Cᵀ, CᵀK = Xᵀ
}

at::Tensor GramStep::CoefficientsOfState(const at::Tensor& state) const {
  return state[0].t();
}

at::Tensor GramStep::MeanCoefficients() const {
  return (at::eye(dh_, at::kDouble) / static_cast<double>(h_)).repeat({h_, 1});
}

at::Tensor GramStep::CoefficientsOf(const at::Tensor& shared) const {
  // K C = W̃ᵀS, the normal equations of min ‖W̃C − S‖, with a ridge of 1e-12
  // of K's mean eigenvalue: exact to that where K is regular, the
  // minimum-norm fit where it is not.
  const at::Tensor& k = heads_.gram;
  const double ridge = 1e-12 * heads_.energy / static_cast<double>(n_);
  const at::Tensor l =
      at::linalg_cholesky(k + ridge * at::eye(n_, k.options()));
  return at::cholesky_solve(at::matmul(heads_.cols.t(), shared), l);
}

at::Tensor GramStep::SharedOf(const at::Tensor& state) const {
  return at::matmul(heads_.cols, state[0].to(at::kDouble).t());
}

// From S = W̃C_f (X_f = W̃ᵀS): the residual Grams are G_h = K_hh − X_h − X_hᵀ
// + SᵀS with SᵀS = C_fᵀX_f, and their top-r eigenvectors are B_h. For those
// subspaces the best S of the gauged objective Σ_h‖(W̃_h − S)Q_h‖² +
// ε‖(W̃_h − S)B_h‖² (Q_h = I − P_h, P_h = B_hB_hᵀ; the second term is ε‖U_h‖²,
// U_h = (W̃_h − S)B_h eliminated) solves S·Σ_h E_h = Σ_h W̃_hE_h with E_h =
// I − (1 − ε)P_h, so S = Σ_h W̃_h C_h with C_h = E_h·A⁻¹, A = Σ_h E_h = H·I −
// (1 − ε)Σ_hP_h (eigenvalues in [εH, H]: positive definite), and X = W̃ᵀS =
// (Σ_h K_{:,h} − (1 − ε)Σ_h K_{:,h}P_h)·A⁻¹. With orthonormal B_h the
// objective needs no residual either: Σ‖W̃_h − S‖² = tr K − 2Σ_h tr X_h +
// H·tr SᵀS, and Σ‖U_h‖² = Σ_h⟨K_hhB_h, B_h⟩ − 2Σ_h⟨X_h, P_h⟩ +
// ⟨SᵀS, Σ_hP_h⟩; the objective is their difference. Everything is computed
// transposed (Cᵀ, Xᵀ [d_h, n]; B_hᵀ times K's rows of head h, which K's
// symmetry makes (K_{:,h}B_h)ᵀ): every GEMM then reads whole rows, with n
// columns.
Point GramStep::Step(const at::Tensor& from) const {
  Point p;
  // X_hᵀ [H, d_h, d_h]: head h's columns of Xᵀ.
  const at::Tensor xt_from = from[1].view({dh_, h_, dh_}).permute({1, 0, 2});
  const at::Tensor gram = head_grams_ - xt_from - xt_from.transpose(1, 2) +
                          Symmetric(at::matmul(from[0], from[1].t()));
  const int64_t r = opt_.rank;
  p.b = FreeSubspaces(gram, r, mask_);
  const at::Tensor bt = p.b.transpose(1, 2);
  const at::Tensor kbt = at::matmul(bt, head_rows_);  // (K_{:,h}B_h)ᵀ [H, r, n]
  const at::Tensor b_cols =
      p.b.permute({1, 0, 2}).reshape({dh_, h_ * r});           // [B_1 … B_H]
  const at::Tensor proj_sum = at::matmul(b_cols, b_cols.t());  // Σ_h P_h
  const at::Tensor proj = at::matmul(p.b, bt);                 // P_h
  const double keep = 1 - opt_.gauge;
  const at::Tensor eye = at::eye(dh_, proj.options());
  const at::Tensor a = static_cast<double>(h_) * eye - keep * proj_sum;
  // Cᵀ = A⁻¹[E_1 … E_H] and Xᵀ = A⁻¹(Σ_h K_{:,h}E_h)ᵀ, written into the
  // state's halves (A⁻¹ explicitly: its condition is at most 1/ε).
  const at::Tensor a_inv = at::cholesky_inverse(at::linalg_cholesky(a));
  p.s = at::empty({2, dh_, n_}, a.options());
  at::Tensor ct = p.s[0], xt_new = p.s[1];
  at::mm_out(ct, a_inv,
             (eye - keep * proj).permute({1, 0, 2}).reshape({dh_, n_}));
  at::mm_out(xt_new, a_inv,
             row_sum_ - keep * at::matmul(b_cols, kbt.view({h_ * r, n_})));
  const at::Tensor xt = p.s[1].view({dh_, h_, dh_}).permute({1, 0, 2});
  const at::Tensor ss = Symmetric(at::matmul(p.s[0], p.s[1].t()));
  const double total = heads_.energy - 2 * Sum(xt.diagonal(0, 1, 2)) +
                       static_cast<double>(h_) * Sum(ss.diagonal());
  // B_hᵀK_hh: head h's own columns of its block of Bᵀ·K.
  const at::Tensor kbt_own =
      kbt.view({h_, r, h_, dh_}).diagonal(0, 0, 2).permute({2, 0, 1});
  const double u_energy =
      Sum(kbt_own * bt) - 2 * Sum(xt * proj) + Sum(ss * proj_sum);
  // Clamped: near an exact fit the difference rounds to a tiny negative.
  p.objective = std::max(0.0, total - u_energy);
  p.gauged = p.objective + opt_.gauge * u_energy;
  return p;
}

}  // namespace lrkv
