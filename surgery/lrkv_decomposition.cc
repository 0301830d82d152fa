// The LRKV decomposition of one projection of one layer (see the header).
#include "surgery/lrkv_decomposition.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "surgery/lrkv_alternation.h"
#include "surgery/lrkv_gram_step.h"

namespace lrkv {
namespace {

// The free support's float32 run (see Alternate) is used from this many
// weights on (below it a float64 step costs too little to matter); the float64
// polish after it stops after one step that gains less than the tolerance.
constexpr int64_t kFloat32PhaseMinElements = 1 << 16;
constexpr size_t kPolishWindow = 1;

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

// Plane mode: B_h selects coordinates, so every product of the free step
// (lrkv_gram_step.h) is a column selection and the problem splits by column j:
// S's column is the weighted mean of the heads' columns, weight ε where head h
// keeps plane j in its residual and 1 where it does not. A step costs
// O(H·k·d_h), no GEMM, in float64.
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

// Why the gauge term: where the heads' residual subspaces (nearly) share a
// direction, the objective hardly depends on S along it (U_h absorbs the
// difference), and the exact minimiser there is huge, S and U_hB_hᵀ cancelling
// (measured: |S| 140× |W| on a two-head layer) — a decomposition fp32 and bf16
// storage round badly. ε·Σ‖U_h‖² picks, among such near-equal points, the one
// where S carries what the heads share (the mean) and U_h only their
// differences; the objective pays at most ε·Σ‖U_h‖² (the extrapolated
// alternation that minimises it: lrkv_alternation.h).
//
// Why two precisions (free support): a step's cost is its GEMMs and the H
// eigendecompositions of d_h × d_h Grams, about 2.5× cheaper in float32, and
// the tail of the alternation is long (about a hundred steps on a dense
// spectrum such as random weights'). The float32 run only finds S; the
// float64 steps that follow re-derive the subspaces and the objective from
// it, and they alone are recorded, so the trace is float64 throughout. Both
// run in the heads' Gram coordinates (GramStep); `best` comes and goes as S.
void Alternate(const at::Tensor& wt, const at::Tensor& mask,
               const LrkvDecompositionOptions& opt, Point* best,
               LrkvDecomposition* out) {
  Trace trace{out->objective, out->gauged_objective};
  if (opt.support == ResidualSupport::kRopePlanes) {
    out->converged = RunAlternation(PlaneStep(wt, opt),
                                    {opt.max_iters, opt.tol}, best, &trace);
  } else {
    const HeadGram heads(wt);
    const GramStep exact(heads, mask, opt, at::kDouble);
    at::Tensor coefficients = opt.initial_shared.defined()
                                  ? exact.CoefficientsOf(best->s)
                                  : exact.MeanCoefficients();
    int polish = opt.max_iters;
    if (opt.max_iters > 1 && wt.numel() >= kFloat32PhaseMinElements) {
      // The float32 run's own objectives stay out of the trace (rounded to
      // about 1e-7 of the energy, they would not be comparable with the
      // float64 ones); its start is the trace's.
      const GramStep fast(heads, mask, opt, at::kFloat);
      Trace work{{out->objective.back()}, {out->gauged_objective.back()}};
      Point p{fast.StateOf(coefficients), best->b};
      RunAlternation(fast, {opt.max_iters - 1, opt.tol}, &p, &work);
      out->float32_steps = static_cast<int>(work.gauged.size()) - 1;
      polish -= out->float32_steps;
      coefficients = fast.CoefficientsOfState(p.s);
    }
    Point p{exact.StateOf(coefficients), best->b};
    out->converged =
        RunAlternation(exact, {polish, opt.tol, kPolishWindow}, &p, &trace);
    best->s = exact.SharedOf(p.s);
    best->b = std::move(p.b);
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
