// The LRKV solver's extrapolated alternation (see the header).
//
// Why extrapolate: the alternation alone converges linearly and slowly
// (thousands of steps where the whitened heads are ill-conditioned). Each step
// therefore starts from the state extrapolated along the last accepted move,
// s + β(s − s_prev), with β grown while that pays and cut, restarting from the
// best point, when a step would raise the objective (Ang & Gillis,
// "Accelerating nonnegative matrix factorization algorithms using
// extrapolation", Neural Computation 2019). Accepted points only ever improve.
// (Anderson acceleration over the last 3–10 states, tried on the same heads,
// took as many steps.)
#include "surgery/lrkv_alternation.h"

#include <algorithm>
#include <utility>

namespace lrkv {
namespace {

// The first β, its growth after an improving step, the cut after a failed
// one, and the bound on β.
constexpr double kExtrapolationStart = 0.5, kExtrapolationGrowth = 1.1;
constexpr double kExtrapolationCut = 2.0, kExtrapolationMax = 4.0;
constexpr double kExtrapolationCapGrowth = 1.05;

}  // namespace

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

}  // namespace lrkv
