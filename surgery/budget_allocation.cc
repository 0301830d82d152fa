// Per-layer sizes within a total cache budget (see the header).
#include "surgery/budget_allocation.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace lrkv {

const char* SizeAllocationName(SizeAllocation a) {
  return a == SizeAllocation::kLayers ? "layers" : "uniform";
}

absl::StatusOr<SizeAllocation> ParseSizeAllocation(const std::string& name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "uniform") return SizeAllocation::kUniform;
  if (n == "layers") return SizeAllocation::kLayers;
  return absl::InvalidArgumentError(
      absl::StrCat("allocation '", name, "' is not one of: uniform, layers"));
}

absl::StatusOr<BudgetAllocation> AllocateBudget(
    const std::vector<LayerErrorCurve>& curves,
    const std::function<int64_t(int64_t)>& cost, int64_t budget_elements,
    int64_t uniform_size) {
  BudgetAllocation out;
  out.budget_elements = budget_elements;
  const size_t n = curves.size();
  std::vector<size_t> at(n, 0);  // index into each curve
  int64_t used = 0, uniform_used = 0;
  for (size_t l = 0; l < n; ++l) {
    const LayerErrorCurve& c = curves[l];
    if (c.sizes.empty() || c.sizes.size() != c.errors.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", l, ": no error curve"));
    }
    const auto u = std::find(c.sizes.begin(), c.sizes.end(), uniform_size);
    if (u == c.sizes.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", l, ": the uniform size ", uniform_size,
                       " is not on its curve"));
    }
    out.uniform_estimated_error += c.errors[u - c.sizes.begin()];
    uniform_used += cost(uniform_size);
    used += cost(c.sizes[0]);
  }
  if (uniform_used > budget_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("the uniform plan needs ", uniform_used,
                     " cache elements, over the budget's ", budget_elements));
  }
  while (true) {
    size_t best_layer = n, best_to = 0;
    double best_slope = 0;
    for (size_t l = 0; l < n; ++l) {
      const LayerErrorCurve& c = curves[l];
      const int64_t here = cost(c.sizes[at[l]]);
      for (size_t to = at[l] + 1; to < c.sizes.size(); ++to) {
        const int64_t extra = cost(c.sizes[to]) - here;
        if (extra <= 0 || used + extra > budget_elements) continue;
        const double slope =
            (c.errors[at[l]] - c.errors[to]) / static_cast<double>(extra);
        if (slope > best_slope) {
          best_slope = slope;
          best_layer = l;
          best_to = to;
        }
      }
    }
    if (best_layer == n) break;
    used += cost(curves[best_layer].sizes[best_to]) -
            cost(curves[best_layer].sizes[at[best_layer]]);
    at[best_layer] = best_to;
  }
  for (size_t l = 0; l < n; ++l) {
    out.sizes.push_back(curves[l].sizes[at[l]]);
    out.estimated_error += curves[l].errors[at[l]];
  }
  out.elements_per_token = used;
  if (out.uniform_estimated_error <= out.estimated_error) {
    out.sizes.assign(n, uniform_size);
    out.estimated_error = out.uniform_estimated_error;
    out.elements_per_token = uniform_used;
    out.uniform = true;
  }
  return out;
}

}  // namespace lrkv
