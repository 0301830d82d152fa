// A total KV-cache budget shared out across layers: each layer's size (LRKV
// rank, MLA latent) chosen from its measured error-vs-size curve, so that the
// layers whose error falls fastest per cached element get more of the cache
// (the lever of CARE and Palu's rank search). No LibTorch: the curves are plain
// numbers.
#ifndef LRKV_SURGERY_BUDGET_ALLOCATION_H_
#define LRKV_SURGERY_BUDGET_ALLOCATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lrkv {

// How a conversion sizes its layers.
enum class SizeAllocation {
  kUniform,  // every layer the same rank / latent
  kLayers,   // per layer, from the error curves, within the same total cache
};
const char* SizeAllocationName(SizeAllocation a);
absl::StatusOr<SizeAllocation> ParseSizeAllocation(const std::string& name);

// What a layer's curve measures at each size.
enum class AllocationObjective {
  kAuto,   // kLoss when the conversion can be probed on calibration text, else
           // kError
  kError,  // the decomposition's objective, K and V together (no text needed)
  kLoss,   // the calibration loss with that layer alone converted at that size
};
const char* AllocationObjectiveName(AllocationObjective a);
absl::StatusOr<AllocationObjective> ParseAllocationObjective(
    const std::string& name);

// One layer's error at each size (the decomposition's objective, or the loss
// change it causes alone).
struct LayerErrorCurve {
  /// Sizes the layer may take, ascending (plane mode: even ranks only).
  std::vector<int64_t> sizes;
  /// errors[i]: the error at sizes[i].
  std::vector<double> errors;
};

struct BudgetAllocation {
  std::vector<int64_t> sizes;          // one per layer
  double estimated_error = 0;          // Σ of the curves at `sizes`
  double uniform_estimated_error = 0;  // Σ of the curves at the uniform size
  int64_t elements_per_token = 0;  // cache elements of all layers at `sizes`
  int64_t budget_elements = 0;     // what they had to fit in
  bool uniform = false;            // the uniform plan was at least as good
};

// Greedy on marginal error per cached element: every layer starts at its
// smallest size; then, while the budget allows, the layer whose best move up
// (to any larger size) lowers the error most per extra element takes it. The
// uniform plan (`uniform_size` everywhere, which must fit) is returned instead
// when the curves rate it no worse. `cost(size)` is the cache elements per
// token of one layer at that size.
absl::StatusOr<BudgetAllocation> AllocateBudget(
    const std::vector<LayerErrorCurve>& curves,
    const std::function<int64_t(int64_t)>& cost, int64_t budget_elements,
    int64_t uniform_size);

// The plan `sizes` (each on its layer's curve) as a BudgetAllocation: its
// curves' estimate beside the uniform plan's, its cache elements, and whether
// it is the uniform plan.
absl::StatusOr<BudgetAllocation> AllocationAt(
    const std::vector<LayerErrorCurve>& curves,
    const std::vector<int64_t>& sizes,
    const std::function<int64_t(int64_t)>& cost, int64_t budget_elements,
    int64_t uniform_size);

// Per-layer sizes judged by the loss of the whole converted model: one-layer
// loss changes do not add up (degrading two layers costs more than the sum of
// each alone), so a plan built from them alone can lose to the uniform one.
struct JointRefinementOptions {
  /// Rounds of moves at most; each accepts the best measured move or stops.
  int max_rounds = 6;
  /// Moves measured per round: the ones the one-layer curves rate best.
  int moves_per_round = 6;
};

struct JointRefinement {
  std::vector<int64_t> sizes;  // the plan of lowest measured loss
  double loss = 0;             // its measured loss
  double uniform_loss = 0;     // the uniform plan's measured loss
  double start_loss = 0;       // the starting plan's
  int evaluations = 0;         // plans measured
  int moves = 0;               // moves accepted
};

// Measures the uniform plan and `start` (a plan on the curves' sizes, within
// budget) with `loss` and keeps the lower; then, round by round, measures the
// moves that shift one grid step of size from one layer to another (within
// `budget_elements`), the ones the curves rate best first, and accepts the best
// that lowers the measured loss. Deterministic: ties keep the earlier plan.
absl::StatusOr<JointRefinement> RefineByJointLoss(
    const std::vector<LayerErrorCurve>& curves,
    const std::vector<int64_t>& start, int64_t uniform_size,
    const std::function<int64_t(int64_t)>& cost, int64_t budget_elements,
    const std::function<absl::StatusOr<double>(const std::vector<int64_t>&)>&
        loss,
    const JointRefinementOptions& options = {});

}  // namespace lrkv

#endif  // LRKV_SURGERY_BUDGET_ALLOCATION_H_
