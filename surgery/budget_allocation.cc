// Per-layer sizes within a total cache budget (see the header).
#include "surgery/budget_allocation.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

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

const char* AllocationObjectiveName(AllocationObjective a) {
  switch (a) {
    case AllocationObjective::kError:
      return "error";
    case AllocationObjective::kLoss:
      return "loss";
    case AllocationObjective::kAuto:
      break;
  }
  return "auto";
}

absl::StatusOr<AllocationObjective> ParseAllocationObjective(
    const std::string& name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "auto") return AllocationObjective::kAuto;
  if (n == "error") return AllocationObjective::kError;
  if (n == "loss") return AllocationObjective::kLoss;
  return absl::InvalidArgumentError(absl::StrCat(
      "allocation objective '", name, "' is not one of: auto, error, loss"));
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

namespace {

// Layer l's position on its curve at `size`.
absl::StatusOr<size_t> IndexOnCurve(const std::vector<LayerErrorCurve>& curves,
                                    size_t l, int64_t size) {
  const auto& s = curves[l].sizes;
  const auto it = std::find(s.begin(), s.end(), size);
  if (it == s.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", l, ": size ", size, " is not on its curve"));
  }
  return static_cast<size_t>(it - s.begin());
}

}  // namespace

absl::StatusOr<BudgetAllocation> AllocationAt(
    const std::vector<LayerErrorCurve>& curves,
    const std::vector<int64_t>& sizes,
    const std::function<int64_t(int64_t)>& cost, int64_t budget_elements,
    int64_t uniform_size) {
  if (sizes.size() != curves.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a plan of ", sizes.size(), " sizes for ", curves.size(), " layers"));
  }
  BudgetAllocation out;
  out.sizes = sizes;
  out.budget_elements = budget_elements;
  out.uniform = true;
  for (size_t l = 0; l < curves.size(); ++l) {
    ASSIGN_OR_RETURN(const size_t at, IndexOnCurve(curves, l, sizes[l]));
    ASSIGN_OR_RETURN(const size_t u, IndexOnCurve(curves, l, uniform_size));
    out.estimated_error += curves[l].errors[at];
    out.uniform_estimated_error += curves[l].errors[u];
    out.elements_per_token += cost(sizes[l]);
    out.uniform = out.uniform && sizes[l] == uniform_size;
  }
  return out;
}

absl::StatusOr<JointRefinement> RefineByJointLoss(
    const std::vector<LayerErrorCurve>& curves,
    const std::vector<int64_t>& start, int64_t uniform_size,
    const std::function<int64_t(int64_t)>& cost, int64_t budget_elements,
    const std::function<absl::StatusOr<double>(const std::vector<int64_t>&)>&
        loss,
    const JointRefinementOptions& options) {
  const size_t n = curves.size();
  if (start.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("a plan of ", start.size(), " sizes for ", n, " layers"));
  }
  auto index_of = [&](size_t l, int64_t size) {
    return IndexOnCurve(curves, l, size);
  };
  auto elements = [&](const std::vector<size_t>& at) {
    int64_t used = 0;
    for (size_t l = 0; l < n; ++l) used += cost(curves[l].sizes[at[l]]);
    return used;
  };
  auto sizes_of = [&](const std::vector<size_t>& at) {
    std::vector<int64_t> out(n);
    for (size_t l = 0; l < n; ++l) out[l] = curves[l].sizes[at[l]];
    return out;
  };
  std::vector<size_t> uniform(n), at(n);
  for (size_t l = 0; l < n; ++l) {
    auto u = index_of(l, uniform_size);
    if (!u.ok()) return u.status();
    uniform[l] = *u;
    auto s = index_of(l, start[l]);
    if (!s.ok()) return s.status();
    at[l] = *s;
  }
  if (elements(at) > budget_elements) {
    return absl::InvalidArgumentError("the starting plan is over the budget");
  }
  JointRefinement out;
  auto measure =
      [&](const std::vector<size_t>& plan) -> absl::StatusOr<double> {
    ++out.evaluations;
    return loss(sizes_of(plan));
  };
  auto u = measure(uniform);
  if (!u.ok()) return u.status();
  out.uniform_loss = *u;
  double best = out.uniform_loss;
  if (at != uniform) {
    auto s = measure(at);
    if (!s.ok()) return s.status();
    out.start_loss = *s;
    if (*s < best) {
      best = *s;
    } else {
      at = uniform;
    }
  } else {
    out.start_loss = best;
  }
  for (int round = 0; round < options.max_rounds; ++round) {
    // One grid step up for layer a, one down for layer b, rated by the curves.
    struct Move {
      double rating;
      size_t up, down;
    };
    std::vector<Move> moves;
    for (size_t a = 0; a < n; ++a) {
      if (at[a] + 1 >= curves[a].sizes.size()) continue;
      for (size_t b = 0; b < n; ++b) {
        if (b == a || at[b] == 0) continue;
        std::vector<size_t> plan = at;
        ++plan[a];
        --plan[b];
        if (elements(plan) > budget_elements) continue;
        const auto& ea = curves[a].errors;
        const auto& eb = curves[b].errors;
        moves.push_back(
            {(ea[at[a]] - ea[at[a] + 1]) - (eb[at[b] - 1] - eb[at[b]]), a, b});
      }
    }
    std::stable_sort(
        moves.begin(), moves.end(),
        [](const Move& x, const Move& y) { return x.rating > y.rating; });
    if (static_cast<int>(moves.size()) > options.moves_per_round) {
      moves.resize(options.moves_per_round);
    }
    std::vector<size_t> round_best;
    double round_loss = best;
    for (const Move& m : moves) {
      std::vector<size_t> plan = at;
      ++plan[m.up];
      --plan[m.down];
      auto l = measure(plan);
      if (!l.ok()) return l.status();
      if (*l < round_loss) {
        round_loss = *l;
        round_best = plan;
      }
    }
    if (round_best.empty()) break;
    at = round_best;
    best = round_loss;
    ++out.moves;
  }
  out.sizes = sizes_of(at);
  out.loss = best;
  return out;
}

}  // namespace lrkv
