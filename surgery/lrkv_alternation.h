// The LRKV solver's alternation, apart from what one step computes: points, the
// objective trace, and the extrapolated run that only ever accepts improving
// points (see RunAlternation). Internal to surgery/lrkv_decomposition.cc and
// its steps (lrkv_gram_step.h).
#ifndef LRKV_SURGERY_LRKV_ALTERNATION_H_
#define LRKV_SURGERY_LRKV_ALTERNATION_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace lrkv {

// One point of the alternation: the state `s` a step starts from (S itself, or
// a step's own coordinates of it: see GramStep), the subspaces B_h [H, d_h, r],
// the objective with and without the gauge term, and plane mode's chosen
// planes. Extrapolation combines states linearly, so a state must be linear in
// S.
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

// One alternation from a state: the best subspaces for that S, then the best S
// for those subspaces. Each half minimises exactly, so from an accepted point
// the objective never rises.
class AlternationStep {
 public:
  virtual ~AlternationStep() = default;
  virtual Point Step(const at::Tensor& from) const = 0;
};

// Accepted steps over which the stopping tolerance is judged by default.
inline constexpr size_t kConvergenceWindow = 5;

// How a run of the alternation ends: after `max_steps` accepted steps, or once
// the last `window` of them together gained less than `tol` of the objective
// each.
struct RunLimits {
  int max_steps = 0;
  double tol = 0;
  size_t window = kConvergenceWindow;
};

// Alternates from `best` (its state; B as the last step left it) until
// converged or out of steps, appending the accepted objectives to `trace`,
// whose last entry is the start's (+∞ when unknown, so that the first step is
// always taken). Each step starts from the state extrapolated along the last
// accepted move (see the .cc). Returns whether it converged.
bool RunAlternation(const AlternationStep& step, const RunLimits& limits,
                    Point* best, Trace* trace);

}  // namespace lrkv

#endif  // LRKV_SURGERY_LRKV_ALTERNATION_H_
