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
// The free support's float32 run (see Alternate) is used from this many
// weights on (below it a float64 step costs too little to matter); the float64
// polish after it stops after one step that gains less than the tolerance.
constexpr int64_t kFloat32PhaseMinElements = 1 << 16;
constexpr size_t kPolishWindow = 1;

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
// residual energy (`col_energy` [H, d_h], the diagonal of G_h); U_h is then
// W̃_h − S restricted to them, the exact least-squares fit on that support.
at::Tensor PlaneSubspaces(
    const at::Tensor& col_energy, int64_t rank,
    const std::vector<std::pair<int64_t, int64_t>>& planes,
    std::vector<std::vector<int64_t>>* chosen) {
  const int64_t h = col_energy.size(0), dh = col_energy.size(1),
                n_planes = rank / 2;
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
// εB_hB_hᵀ), that is S·(H·I − (1 − ε)·bb) = wt_sum − (1 − ε)·wbb with bb =
// Σ_h B_hB_hᵀ and wbb = Σ_h W̃_hB_hB_hᵀ. See DecomposeLrkv for why ε. The
// left-hand matrix's eigenvalues lie in [εH, H], so it is positive definite.
at::Tensor SharedGivenSubspaces(const at::Tensor& wt_sum, const at::Tensor& wbb,
                                const at::Tensor& bb, int64_t h, double eps) {
  const at::Tensor lhs =
      static_cast<double>(h) * at::eye(bb.size(0), bb.options()) -
      (1 - eps) * bb;
  const at::Tensor rhs = wt_sum - (1 - eps) * wbb;
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

// One point of the alternation: S, the subspaces B_h, the objective with and
// without the gauge term, and plane mode's chosen planes. U_h = (W̃_h − S)B_h is
// formed once, at the end.
struct Point {
  at::Tensor s, b;
  double objective = 0, gauged = 0;
  std::vector<std::vector<int64_t>> chosen;
};

// The objectives of a trace: after the start point and after each accepted
// step.
struct Trace {
  std::vector<double> objective, gauged;
};

// One alternation from S: the best subspaces for that S, then the best S for
// those subspaces. Each half minimises exactly, so from an accepted point the
// objective never rises.
class AlternationStep {
 public:
  virtual ~AlternationStep() = default;
  virtual Point Step(const at::Tensor& from) const = 0;
};

// What every free-support step reads of the whitened heads W̃ [H, k, d_h], in
// float64, computed once for both precisions' runs.
struct HeadSums {
  explicit HeadSums(const at::Tensor& wt)
      : gram(at::matmul(wt.transpose(1, 2), wt)),  // W̃_hᵀW̃_h
        sum(wt.sum(0)),
        energy(wt.pow(2).sum().item<double>()) {}
  const at::Tensor gram, sum;
  const double energy;  // Σ_h‖W̃_h‖²
};

// Free support (and partial mode's masked one), in the working precision
// `work`: the whitened heads W̃ [H, k, d_h] are given in float64 and kept in
// `work` for the GEMMs and eigh; the objectives are summed in float64 from
// trace identities, so no step forms the [H, k, d_h] residual.
class FreeStep : public AlternationStep {
 public:
  FreeStep(const at::Tensor& wt, const HeadSums& sums, const at::Tensor& mask,
           const LrkvDecompositionOptions& opt, at::ScalarType work)
      : mask_(mask.defined() ? mask.to(work) : mask),
        opt_(opt),
        h_(wt.size(0)),
        k_(wt.size(1)),
        dh_(wt.size(2)),
        wt_(wt.to(work)),
        wt_cols_(wt_.permute({1, 0, 2}).reshape({k_, h_ * dh_})),
        wt_gram_(sums.gram.to(work)),
        wt_sum_(sums.sum),
        wt_sum_work_(sums.sum.to(work)),
        energy_(sums.energy) {}

  Point Step(const at::Tensor& from) const override {
    Point p;
    // G_h = W̃_hᵀW̃_h − X_h − X_hᵀ + SᵀS with X_h = W̃_hᵀS: one GEMM for all
    // heads.
    const at::Tensor x = at::matmul(wt_cols_.t(), from).view({h_, dh_, dh_});
    const at::Tensor gram =
        wt_gram_ - x - x.transpose(1, 2) + at::matmul(from.t(), from);
    p.b = FreeSubspaces(gram, opt_.rank, mask_);
    const at::Tensor wb = at::matmul(wt_, p.b);  // W̃_hB_h [H, k, r]
    const int64_t r = opt_.rank;
    const at::Tensor b_rows =
        p.b.transpose(1, 2).reshape({h_ * r, dh_});  // [B_1ᵀ; …; B_Hᵀ]
    const at::Tensor bb = at::matmul(b_rows.t(), b_rows);  // Σ_h B_hB_hᵀ
    // Σ_h W̃_hB_hB_hᵀ [k, d_h].
    const at::Tensor wbb =
        at::matmul(wb.permute({1, 0, 2}).reshape({k_, h_ * r}), b_rows);
    p.s = SharedGivenSubspaces(wt_sum_work_, wbb, bb, h_, opt_.gauge);
    // With orthonormal B_h: Σ‖W̃_h − S‖² = Σ‖W̃_h‖² − 2⟨S, ΣW̃_h⟩ + H‖S‖², and
    // Σ‖U_h‖² = Σ‖(W̃_h − S)B_h‖² = Σ‖W̃_hB_h‖² − 2⟨S, ΣW̃_hB_hB_hᵀ⟩ +
    // ⟨SᵀS, ΣB_hB_hᵀ⟩; the objective is their difference. (Clamped: near an
    // exact fit it rounds to a tiny negative.)
    const at::Tensor s = p.s.to(at::kDouble);
    const double total =
        energy_ - 2 * (s * wt_sum_).sum().item<double>() +
        static_cast<double>(h_) * s.pow(2).sum().item<double>();
    const double u_energy =
        wb.pow(2).sum(at::kDouble).item<double>() -
        2 * (s * wbb.to(at::kDouble)).sum().item<double>() +
        (at::matmul(s.t(), s) * bb.to(at::kDouble)).sum().item<double>();
    p.objective = std::max(0.0, total - u_energy);
    p.gauged = p.objective + opt_.gauge * u_energy;
    return p;
  }

 private:
  const at::Tensor mask_;
  const LrkvDecompositionOptions& opt_;
  const int64_t h_, k_, dh_;
  const at::Tensor wt_, wt_cols_, wt_gram_, wt_sum_, wt_sum_work_;
  const double energy_;
};

// Plane mode: B_h selects coordinates, so every product above is a column
// selection and the problem splits by column j: S's column is the weighted mean
// of the heads' columns, weight ε where head h keeps plane j in its residual
// and 1 where it does not. A step costs O(H·k·d_h), no GEMM, in float64.
class PlaneStep : public AlternationStep {
 public:
  PlaneStep(const at::Tensor& wt, const LrkvDecompositionOptions& opt)
      : wt_(wt), opt_(opt) {}

  Point Step(const at::Tensor& from) const override {
    Point p;
    // The diagonal of G_h: each coordinate's residual energy [H, d_h].
    const at::Tensor col_energy = (wt_ - from).pow(2).sum(1);
    p.b = PlaneSubspaces(col_energy, opt_.rank, opt_.planes, &p.chosen);
    const at::Tensor in_residual = p.b.sum(2);  // m_hj ∈ {0, 1} [H, d_h]
    const at::Tensor weight = 1 - (1 - opt_.gauge) * in_residual;
    p.s = (wt_ * weight.unsqueeze(1)).sum(0) / weight.sum(0);
    const at::Tensor residual = (wt_ - p.s).pow(2).sum(1);  // [H, d_h]
    const double u_energy = (residual * in_residual).sum().item<double>();
    p.objective = (residual * (1 - in_residual)).sum().item<double>();
    p.gauged = p.objective + opt_.gauge * u_energy;
    return p;
  }

 private:
  const at::Tensor& wt_;
  const LrkvDecompositionOptions& opt_;
};

// How a run of the alternation ends: after `max_steps` accepted steps, or once
// the last `window` of them together gained less than `tol` of the objective
// each.
struct RunLimits {
  int max_steps = 0;
  double tol = 0;
  size_t window = kConvergenceWindow;
};

// Alternates from `best` (its S; B as the last step left it) until converged
// or out of steps, appending the accepted objectives to `trace`, whose last
// entry is the start's (+∞ when unknown, so that the first step is always
// taken). Returns whether it converged.
bool RunAlternation(const AlternationStep& step, const RunLimits& limits,
                    Point* best, Trace* trace);

bool RunAlternation(const AlternationStep& step, const RunLimits& limits,
                    Point* best, Trace* trace) {
  at::Tensor s_prev = best->s, from = best->s;
  bool extrapolated = false;
  double beta = kExtrapolationStart, beta_cap = 1.0;
  const size_t start = trace->gauged.size() - 1;
  int steps = 0;
  // Only accepted steps count: a rejected try is always followed by a plain
  // step from the best point, which is accepted, so tries stay below
  // 2·max_steps.
  while (steps < limits.max_steps) {
    Point next = step.Step(from);
    const double prev = trace->gauged.back();
    if (!(next.gauged < prev) && extrapolated) {
      // The extrapolated start did worse: shrink β and restart from the best
      // point.
      beta_cap = beta;
      beta /= kExtrapolationCut;
      from = best->s;
      extrapolated = false;
      continue;
    }
    // Rounding only could raise it; the first step is always taken, so that
    // B_h is a valid support even where the heads were equal to begin with.
    if (next.gauged > prev && steps > 0) return true;  // keep the better point
    s_prev = best->s;
    *best = std::move(next);
    trace->objective.push_back(best->objective);
    trace->gauged.push_back(best->gauged);
    ++steps;
    // Converged once the last `window` steps together gained less than tol
    // each: one slow step (a plain one after a rejected try, or a swamp the
    // alternation crosses slowly) does not stop it.
    const size_t n = static_cast<size_t>(steps);
    const size_t window = std::min(n, limits.window);
    const double before = trace->gauged[start + n - window];
    if (best->gauged == 0 ||
        (window == limits.window &&
         before - best->gauged <=
             static_cast<double>(window) * limits.tol * before)) {
      return true;
    }
    beta = std::min(beta_cap, beta * kExtrapolationGrowth);
    beta_cap = std::min(kExtrapolationMax, beta_cap * kExtrapolationCapGrowth);
    from = best->s + beta * (best->s - s_prev);
    extrapolated = true;
  }
  return false;
}

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
//
// Why two precisions (free support): a step's cost is its GEMMs and the H
// eigendecompositions of d_h × d_h Grams, about 2.5× cheaper in float32, and
// the tail of the alternation is long (about a hundred steps on a dense
// spectrum such as random weights'). The float32 run only finds S; the
// float64 steps that follow re-derive the subspaces and the objective from
// it, and they alone are recorded, so the trace is float64 throughout.
void Alternate(const at::Tensor& wt, const at::Tensor& mask,
               const LrkvDecompositionOptions& opt, Point* best,
               LrkvDecomposition* out) {
  Trace trace{out->objective, out->gauged_objective};
  if (opt.support == ResidualSupport::kRopePlanes) {
    out->converged = RunAlternation(PlaneStep(wt, opt),
                                    {opt.max_iters, opt.tol}, best, &trace);
  } else {
    const HeadSums sums(wt);
    int polish = opt.max_iters;
    if (opt.max_iters > 1 && wt.numel() >= kFloat32PhaseMinElements) {
      // The float32 run's own objectives stay out of the trace (rounded to
      // about 1e-7 of the energy, they would not be comparable with the
      // float64 ones); its start is the trace's.
      Trace work{{out->objective.back()}, {out->gauged_objective.back()}};
      Point p{best->s.to(at::kFloat), best->b.to(at::kFloat)};
      RunAlternation(FreeStep(wt, sums, mask, opt, at::kFloat),
                     {opt.max_iters - 1, opt.tol}, &p, &work);
      out->float32_steps = static_cast<int>(work.gauged.size()) - 1;
      polish -= out->float32_steps;
      best->s = p.s.to(at::kDouble);
    }
    out->converged =
        RunAlternation(FreeStep(wt, sums, mask, opt, at::kDouble),
                       {polish, opt.tol, kPolishWindow}, best, &trace);
  }
  out->objective = std::move(trace.objective);
  out->gauged_objective = std::move(trace.gauged);
  out->planes_chosen = std::move(best->chosen);
}

// The errors of the final point (from the residual itself, not the trace's
// difference of norms), and its factors back in original coordinates.
void Finish(const at::Tensor& wt, const at::Tensor& basis,
            const at::Tensor& whitening, int64_t r, const Point& p,
            LrkvDecomposition* out) {
  // u: Ũ [H, k, r] (whitened coordinates, in the reduced basis if any); b: B
  // [H, dh, r].
  const at::Tensor residual = wt - p.s;
  at::Tensor s = p.s, u = at::matmul(residual, p.b);
  const at::Tensor err = residual - at::matmul(u, p.b.transpose(1, 2));
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
    s = at::matmul(basis, s);
    u = at::matmul(basis, u);
  }
  if (whitening.defined()) {
    // Back to original coordinates: S = L⁻ᵀ S̃, U_h = L⁻ᵀ Ũ_h.
    const at::Tensor lt = whitening.t();
    out->shared = at::linalg_solve_triangular(lt, s, /*upper=*/true);
    out->down = r > 0 ? at::linalg_solve_triangular(lt, u, /*upper=*/true) : u;
  } else {
    out->shared = s;
    out->down = u;
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
  Point best;
  best.s = wt.mean(0);
  if (opt.initial_shared.defined()) {
    at::Tensor s0 = opt.initial_shared.to(at::kDouble);
    if (whitening.defined()) s0 = at::matmul(whitening.t(), s0);
    best.s = basis.defined() ? at::matmul(basis.t(), s0) : s0;
  }
  best.b = at::zeros({h, dh, r}, at::kDouble);
  out.objective.push_back((wt - best.s).pow(2).sum().item<double>());
  out.gauged_objective.push_back(out.objective.back());
  if (r > 0) Alternate(wt, mask, opt, &best, &out);
  if (r == 0 || out.objective.back() == 0) out.converged = true;
  Finish(wt, basis, whitening, r, best, &out);
  return out;
}

}  // namespace lrkv
