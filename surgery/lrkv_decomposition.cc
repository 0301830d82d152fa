// The LRKV decomposition of one projection of one layer (see the header).
#include "surgery/lrkv_decomposition.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace lrkv {
namespace {

// Extrapolation of S between alternations (see DecomposeLrkv): the first β, its
// growth after an improving step, the cut after a failed one, and the bound on
// β.
constexpr double kExtrapolationStart = 0.5, kExtrapolationGrowth = 1.1;
constexpr double kExtrapolationCut = 2.0, kExtrapolationMax = 4.0;
constexpr double kExtrapolationCapGrowth = 1.05;
// Accepted steps over which the stopping tolerance is judged (see
// DecomposeLrkv).
constexpr size_t kConvergenceWindow = 5;

// The residual subspaces B_h [H, dh, r] (orthonormal columns) for a given S,
// chosen from the residual Grams G_h = (W̃_h − S)ᵀ(W̃_h − S) [H, dh, dh].

// Free support: the top-r eigenvectors of G_h, the best rank-r right singular
// subspace of W̃_h − S (d_h is small, so the d_h × d_h eigenproblem is much
// cheaper than an SVD of the tall d × d_h matrix). `mask` zeroes the
// coordinates the residual must avoid.
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

// Plane mode: B_h selects the coordinates of the r/2 planes with the most
// residual energy (the diagonal of G_h); U_h is then W̃_h − S restricted to
// them, the exact least-squares fit on that support.
at::Tensor PlaneSubspaces(
    const at::Tensor& gram, int64_t rank,
    const std::vector<std::pair<int64_t, int64_t>>& planes,
    std::vector<std::vector<int64_t>>* chosen) {
  const int64_t h = gram.size(0), dh = gram.size(2), n_planes = rank / 2;
  const at::Tensor col_energy = gram.diagonal(0, 1, 2).contiguous();  // [H, dh]
  auto acc = col_energy.accessor<double, 2>();
  at::Tensor b = at::zeros({h, dh, rank}, at::kDouble);
  auto b_acc = b.accessor<double, 3>();
  chosen->assign(h, {});
  for (int64_t head = 0; head < h; ++head) {
    std::vector<int64_t> order(planes.size());
    for (size_t p = 0; p < planes.size(); ++p)
      order[p] = static_cast<int64_t>(p);
    auto energy = [&](int64_t p) {
      return acc[head][planes[p].first] + acc[head][planes[p].second];
    };
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) {
      return energy(a) > energy(c);
    });
    std::vector<int64_t> keep(order.begin(), order.begin() + n_planes);
    std::sort(keep.begin(), keep.end());
    for (int64_t j = 0; j < n_planes; ++j) {
      b_acc[head][planes[keep[j]].first][2 * j] = 1.0;
      b_acc[head][planes[keep[j]].second][2 * j + 1] = 1.0;
    }
    (*chosen)[head] = keep;
  }
  return b;
}

// The best S for fixed residual subspaces, with U_h = (W̃_h − S)B_h eliminated,
// of the gauged objective Σ_h ‖(W̃_h − S)Q_h‖² + ε‖(W̃_h − S)B_h‖² (Q_h = I −
// B_hB_hᵀ; the second term is ε‖U_h‖²): S·Σ(Q_h + εB_hB_hᵀ) = Σ W̃_h(Q_h +
// εB_hB_hᵀ). See DecomposeLrkv for why ε. `wb` = W̃_h B_h [H, k, r].
at::Tensor SharedGivenSubspaces(const at::Tensor& wt_sum, const at::Tensor& wb,
                                const at::Tensor& b, double eps) {
  const int64_t h = b.size(0), dh = b.size(1), r = b.size(2), k = wb.size(1);
  const at::Tensor b_rows =
      b.transpose(1, 2).reshape({h * r, dh});  // [B_1ᵀ; …; B_Hᵀ]
  // Σ_h (Q_h + εB_hB_hᵀ) = H·I − (1 − ε)Σ_h B_hB_hᵀ, and the same for the
  // right-hand side: one GEMM each. Its eigenvalues lie in [εH, H], so it is
  // positive definite.
  const at::Tensor lhs = static_cast<double>(h) * at::eye(dh, at::kDouble) -
                         (1 - eps) * at::matmul(b_rows.t(), b_rows);
  const at::Tensor rhs =
      wt_sum -
      (1 - eps) * at::matmul(wb.permute({1, 0, 2}).reshape({k, h * r}), b_rows);
  // S·lhs = rhs: Sᵀ = lhs⁻¹ rhsᵀ.
  return at::cholesky_solve(rhs.t(), at::linalg_cholesky(lhs)).t();
}

}  // namespace

namespace {

// The options checked against weights [H_kv, d, d_h]; the partial mode's mask
// of the coordinates the residual may use (undefined otherwise).
absl::StatusOr<at::Tensor> CheckedSupport(const at::Tensor& weights,
                                          const LrkvDecompositionOptions& opt) {
  if (weights.dim() != 3) {
    return absl::InvalidArgumentError("LRKV weights must be [H_kv, d, d_h]");
  }
  const int64_t dh = weights.size(2), r = opt.rank;
  if (r < 0 || r > dh) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LRKV rank r=", r, " must lie in [0, ", dh, "] (the head dim)"));
  }
  if (!(opt.gauge > 0 && opt.gauge < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LRKV gauge weight ", opt.gauge, " must lie in (0, 1)"));
  }
  if (opt.support == ResidualSupport::kRopePlanes &&
      (r % 2 != 0 || r / 2 > static_cast<int64_t>(opt.planes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("plane mode needs an even rank of at most ",
                     2 * opt.planes.size(), ", got ", r));
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
  return mask;
}

// One point of the alternation: S, the subspaces B_h and U_h, the objective
// with and without the gauge term, and plane mode's chosen planes.
struct Point {
  at::Tensor s, b, u;
  double objective = 0, gauged = 0;
  std::vector<std::vector<int64_t>> chosen;
};

// The whitened problem (in the reduced basis where there is one) and its
// alternation.
class Alternation {
 public:
  Alternation(const at::Tensor& wt, const at::Tensor& mask,
              const LrkvDecompositionOptions& opt)
      : wt_(wt),
        mask_(mask),
        opt_(opt),
        h_(wt.size(0)),
        k_(wt.size(1)),
        dh_(wt.size(2)),
        wt_sum_(wt.sum(0)),
        wt_cols_(wt.permute({1, 0, 2}).reshape({k_, h_ * dh_})),  // [W̃_1 … W̃_H]
        wt_gram_(at::matmul(wt.transpose(1, 2), wt)) {}  // W̃_hᵀW̃_h

  // One alternation from `from`: the best subspaces for that S, then the best S
  // (and U) for those subspaces. Each half minimises exactly, so from an
  // accepted point the objective never rises.
  Point Step(const at::Tensor& from) const {
    Point p;
    // G_h = W̃_hᵀW̃_h − X_h − X_hᵀ + SᵀS with X_h = W̃_hᵀS: one GEMM for all
    // heads.
    const at::Tensor x = at::matmul(wt_cols_.t(), from).view({h_, dh_, dh_});
    const at::Tensor gram =
        wt_gram_ - x - x.transpose(1, 2) + at::matmul(from.t(), from);
    p.b = opt_.support == ResidualSupport::kRopePlanes
              ? PlaneSubspaces(gram, opt_.rank, opt_.planes, &p.chosen)
              : FreeSubspaces(gram, opt_.rank, mask_);
    const at::Tensor wb = at::matmul(wt_, p.b);
    p.s = SharedGivenSubspaces(wt_sum_, wb, p.b, opt_.gauge);
    p.u = wb - at::matmul(p.s, p.b);
    // B_h has orthonormal columns: ‖R_hQ_h‖² = ‖R_h‖² − ‖R_hB_h‖², R_h = W̃_h −
    // S. (Clamped: near an exact fit the difference rounds to a tiny negative.)
    const double u_energy = p.u.pow(2).sum().item<double>();
    p.objective =
        std::max(0.0, (wt_ - p.s).pow(2).sum().item<double>() - u_energy);
    p.gauged = p.objective + opt_.gauge * u_energy;
    return p;
  }

  // Alternates from `best` (S, with B = U = 0) until converged or max_iters
  // accepted steps, recording the objectives in `out`.
  void Run(Point* best, LrkvDecomposition* out) const;

 private:
  const at::Tensor& wt_;
  const at::Tensor& mask_;
  const LrkvDecompositionOptions& opt_;
  const int64_t h_, k_, dh_;
  const at::Tensor wt_sum_, wt_cols_, wt_gram_;
};

// Why the gauge term: where the heads' residual subspaces (nearly) share a
// direction, the objective hardly depends on S along it (U_h absorbs the
// difference), and the exact minimiser there is huge, S and U_hB_hᵀ cancelling
// (measured: |S| 140× |W| on a two-head layer) — a decomposition fp32 and bf16
// storage round badly. ε·Σ‖U_h‖² picks, among such near-equal points, the one
// where S carries what the heads share (the mean) and U_h only their
// differences; the objective pays at most ε·Σ‖U_h‖². The alternation alone
// converges linearly and slowly (thousands of steps where the whitened heads
// are ill-conditioned). Each step therefore starts from S extrapolated along
// the last accepted move, S + β(S − S_prev), with β grown while that pays and
// cut, restarting from the best point, when a step would raise the objective
// (Ang & Gillis, "Accelerating nonnegative matrix factorization algorithms
// using extrapolation", Neural Computation 2019). Accepted points only ever
// improve.
void Alternation::Run(Point* best, LrkvDecomposition* out) const {
  at::Tensor& s = best->s;
  at::Tensor s_prev = s, from = s;
  bool extrapolated = false;
  double beta = kExtrapolationStart, beta_cap = 1.0;
  // Only accepted steps count towards max_iters: a rejected try is always
  // followed by a plain step from the best point, which is accepted, so tries
  // stay below 2·max_iters.
  while (static_cast<int>(out->objective.size()) - 1 < opt_.max_iters &&
         opt_.rank > 0) {
    Point next = Step(from);
    const double prev = out->gauged_objective.back();
    if (!(next.gauged < prev) && extrapolated) {
      // The extrapolated start did worse: shrink β and restart from the best
      // point.
      beta_cap = beta;
      beta /= kExtrapolationCut;
      from = s;
      extrapolated = false;
      continue;
    }
    // Rounding only could raise it; the first step is always taken, so that B_h
    // is a valid support even where the heads were equal to begin with.
    if (next.gauged > prev &&
        out->objective.size() > 1) {  // keep the better point
      out->converged = true;
      break;
    }
    s_prev = s;
    s = next.s;
    best->b = next.b;
    best->u = next.u;
    out->planes_chosen = std::move(next.chosen);
    out->objective.push_back(next.objective);
    out->gauged_objective.push_back(next.gauged);
    // Converged once the last kConvergenceWindow steps together gained less
    // than tol each: one slow step (a plain one after a rejected try, or a
    // swamp the alternation crosses slowly) does not stop it.
    const size_t n = out->gauged_objective.size() - 1;
    const size_t window = std::min<size_t>(n, kConvergenceWindow);
    const double before = out->gauged_objective[n - window];
    if (next.gauged == 0 ||
        (window == kConvergenceWindow &&
         before - next.gauged <=
             static_cast<double>(window) * opt_.tol * before)) {
      out->converged = true;
      break;
    }
    beta = std::min(beta_cap, beta * kExtrapolationGrowth);
    beta_cap = std::min(kExtrapolationMax, beta_cap * kExtrapolationCapGrowth);
    from = s + beta * (s - s_prev);
    extrapolated = true;
  }
}

// The errors of the final point (from the residual itself, not the trace's
// difference of norms), and its factors back in original coordinates.
void Finish(const at::Tensor& wt, const at::Tensor& basis,
            const at::Tensor& whitening, int64_t r, Point p,
            LrkvDecomposition* out) {
  // u: Ũ [H, k, r] (whitened coordinates, in the reduced basis if any); b: B
  // [H, dh, r].
  const at::Tensor err = wt - p.s - at::matmul(p.u, p.b.transpose(1, 2));
  const auto head_err = err.pow(2).sum({1, 2}).sqrt();
  const auto head_norm = wt.pow(2).sum({1, 2}).sqrt();
  for (int64_t i = 0; i < wt.size(0); ++i) {
    const double n = head_norm[i].item<double>();
    out->head_rel_error.push_back(n > 0 ? head_err[i].item<double>() / n : 0.0);
  }
  const double energy = wt.pow(2).sum().item<double>();
  const double final_objective = err.pow(2).sum().item<double>();
  out->rel_error = energy > 0 ? std::sqrt(final_objective / energy) : 0.0;
  if (basis.defined()) {
    p.s = at::matmul(basis, p.s);
    p.u = at::matmul(basis, p.u);
  }
  if (whitening.defined()) {
    // Back to original coordinates: S = L⁻ᵀ S̃, U_h = L⁻ᵀ Ũ_h.
    const at::Tensor lt = whitening.t();
    out->shared = at::linalg_solve_triangular(lt, p.s, /*upper=*/true);
    out->down =
        r > 0 ? at::linalg_solve_triangular(lt, p.u, /*upper=*/true) : p.u;
  } else {
    out->shared = p.s;
    out->down = p.u;
  }
  out->up = p.b;
}

}  // namespace

absl::StatusOr<LrkvDecomposition> DecomposeLrkv(
    const at::Tensor& weights, const at::Tensor& whitening,
    const LrkvDecompositionOptions& opt) {
  ASSIGN_OR_RETURN(const at::Tensor mask, CheckedSupport(weights, opt));
  const int64_t h = weights.size(0), d = weights.size(1), dh = weights.size(2);
  const int64_t r = opt.rank;
  at::Tensor w = weights.to(at::kDouble);
  at::Tensor wt =
      whitening.defined() ? at::matmul(whitening.t(), w) : w;  // Lᵀ W_h
  // S and every U_h lie in the span of the columns of all W̃_h (the optimum's S
  // is a combination of them, U_h = (W̃_h − S)B_h too): where that span is
  // smaller than d (GQA: H_kv·d_h < d), solve in an orthonormal basis Q of it,
  // W̃_h = Q R_h, exactly.
  at::Tensor basis;
  if (h * dh < d && r > 0) {
    basis = std::get<0>(
        at::linalg_qr(wt.permute({1, 0, 2}).reshape({d, h * dh}), "reduced"));
    wt = at::matmul(basis.t(), wt);  // [H, k, dh]
  }
  LrkvDecomposition out;
  const Alternation alternation(wt, mask, opt);
  Point best;
  best.s = wt.mean(0);
  if (opt.initial_shared.defined()) {
    at::Tensor s0 = opt.initial_shared.to(at::kDouble);
    if (whitening.defined()) s0 = at::matmul(whitening.t(), s0);
    best.s = basis.defined() ? at::matmul(basis.t(), s0) : s0;
  }
  best.b = at::zeros({h, dh, r}, at::kDouble);
  best.u = at::zeros({h, wt.size(1), r}, at::kDouble);
  out.objective.push_back((wt - best.s).pow(2).sum().item<double>());
  out.gauged_objective.push_back(out.objective.back());
  alternation.Run(&best, &out);
  if (r == 0 || out.objective.back() == 0) out.converged = true;
  Finish(wt, basis, whitening, r, std::move(best), &out);
  return out;
}

}  // namespace lrkv
