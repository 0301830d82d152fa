// The per-layer size allocation, a stage over any sized K/V scheme: each
// layer's curve (the decomposition's objective, or the calibration loss of the
// model with that layer alone converted), a plan within the total cache
// (AllocateBudget), and by loss its refinement on the measured loss of whole
// converted models (RefineByJointLoss).
#ifndef LRKV_SURGERY_LAYER_ALLOCATION_H_
#define LRKV_SURGERY_LAYER_ALLOCATION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stop_check.h"
#include "runtime/llama_weights.h"
#include "surgery/budget_allocation.h"
#include "surgery/kv_scheme.h"

namespace lrkv {

// The mean loss (nats per predicted token) on calibration text of the source
// model with each layer's K/V replaced by kv[layer] (dense per-KV-head weights;
// a layer kept as it is gets its own). Per-layer sizes by loss call it per
// layer and candidate size, then per plan tried. The converter knows no text:
// the caller owns the model and the documents (surgery/convert_job.cc).
using KvLossProbe =
    std::function<absl::StatusOr<double>(const std::vector<DenseKv>& kv)>;

// Source layer `i` as the schemes read it.
using SourceLayerReader = std::function<absl::StatusOr<SourceLayer>(int64_t i)>;

struct LayerAllocation {
  // What the curves measured: kError or kLoss (never kAuto).
  AllocationObjective objective = AllocationObjective::kError;
  BudgetAllocation plan;
  std::vector<LayerErrorCurve> curves;
  // By loss: the source's calibration loss, and the refinement on whole models.
  double source_loss = 0;
  std::optional<JointRefinement> refinement;
};

// Whether `options` ask for per-layer sizes by loss of `scheme` (kAuto: by loss
// when a probe is given and the scheme's candidates run densely).
bool AllocatesByLoss(const KvScheme& scheme, const ConversionOptions& options,
                     bool has_probe);

// Per-layer sizes for `scheme` within the total cache of options.budget × the
// source's (or the uniform target's). InvalidArgument when loss is asked
// without a probe; CancelledError when `stop` asks.
absl::StatusOr<LayerAllocation> AllocateLayerSizes(
    KvScheme& scheme, const ModelConfig& config, const LlamaWeights& weights,
    const ConversionOptions& options, const SourceLayerReader& read_layer,
    const StopCheck& stop, const KvLossProbe& loss_probe);

}  // namespace lrkv

#endif  // LRKV_SURGERY_LAYER_ALLOCATION_H_
