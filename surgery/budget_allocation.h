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

// One layer's error (the decomposition's objective, K and V together) at each
// size.
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

}  // namespace lrkv

#endif  // LRKV_SURGERY_BUDGET_ALLOCATION_H_
