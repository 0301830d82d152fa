// The per-layer size allocation over a sized K/V scheme (see
// layer_allocation.h).
#include "surgery/layer_allocation.h"

#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace lrkv {
namespace {

// The loss probes of an allocation by loss: the source's dense K/V that every
// probe starts from, and every layer's candidates at each size on its curve (in
// the converted layout), which plans are then built from.
class LossProbes {
 public:
  LossProbes(const KvScheme& scheme, const StopCheck& stop,
             const KvLossProbe& probe)
      : scheme_(scheme),
        stop_(stop),
        probe_(probe),
        candidates_(scheme.converted_config().num_layers) {}

  // The source's loss, which every loss change is measured against.
  absl::StatusOr<double> MeasureSource(const ModelConfig& config,
                                       const LlamaWeights& weights) {
    RETURN_IF_ERROR(CheckStop(stop_, "allocation (the source's loss)"));
    for (const LayerWeights& l : weights.layers)
      source_kv_.push_back(ExpandKv(config, l));
    ASSIGN_OR_RETURN(base_loss_, probe_(source_kv_));
    return base_loss_;
  }

  // The loss change with layer i alone converted to `candidate`, kept.
  CandidateLoss ForLayer(int64_t i) {
    return [this, i](int64_t size,
                     LayerWeights candidate) -> absl::StatusOr<double> {
      RETURN_IF_ERROR(
          CheckStop(stop_, absl::StrCat("allocation (loss of layer ", i, ")")));
      std::vector<DenseKv> kv = source_kv_;
      kv[i] = ExpandKv(scheme_.converted_config(), candidate);
      ASSIGN_OR_RETURN(const double loss, probe_(kv));
      candidates_[i][size] = std::move(candidate);
      return loss - base_loss_;
    };
  }

  // The loss of the model converted at `plan` (candidate sizes).
  absl::StatusOr<double> PlanLoss(const std::vector<int64_t>& plan) {
    RETURN_IF_ERROR(CheckStop(stop_, "allocation (loss of a plan)"));
    std::vector<DenseKv> kv;
    for (size_t i = 0; i < plan.size(); ++i) {
      kv.push_back(
          ExpandKv(scheme_.converted_config(), candidates_[i].at(plan[i])));
    }
    return probe_(kv);
  }

 private:
  const KvScheme& scheme_;
  const StopCheck& stop_;
  const KvLossProbe& probe_;
  std::vector<DenseKv> source_kv_;
  double base_loss_ = 0;
  std::vector<std::map<int64_t, LayerWeights>> candidates_;
};

}  // namespace

bool AllocatesByLoss(const KvScheme& scheme, const ConversionOptions& o,
                     bool has_probe) {
  return o.allocation_objective == AllocationObjective::kLoss ||
         (o.allocation_objective == AllocationObjective::kAuto && has_probe &&
          scheme.probes_loss_densely());
}

absl::StatusOr<LayerAllocation> AllocateLayerSizes(
    KvScheme& scheme, const ModelConfig& config, const LlamaWeights& weights,
    const ConversionOptions& o, const SourceLayerReader& read_layer,
    const StopCheck& stop, const KvLossProbe& loss_probe) {
  LayerAllocation out;
  const bool by_loss =
      AllocatesByLoss(scheme, o, static_cast<bool>(loss_probe));
  if (by_loss && !loss_probe) {
    return absl::InvalidArgumentError(
        "--allocation-objective loss measures the loss on calibration text "
        "(--calib)");
  }
  out.objective =
      by_loss ? AllocationObjective::kLoss : AllocationObjective::kError;
  LossProbes probes(scheme, stop, loss_probe);
  if (by_loss) {
    ASSIGN_OR_RETURN(out.source_loss, probes.MeasureSource(config, weights));
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    RETURN_IF_ERROR(
        CheckStop(stop, absl::StrCat("error curves (layer ", i, ")")));
    ASSIGN_OR_RETURN(const SourceLayer layer, read_layer(i));
    const CandidateLoss loss = by_loss ? probes.ForLayer(i) : CandidateLoss();
    ASSIGN_OR_RETURN(LayerErrorCurve curve,
                     scheme.Curve(layer, by_loss ? &loss : nullptr));
    out.curves.push_back(std::move(curve));
  }
  const AttentionShape shape = ShapeOf(config);
  const int64_t budget_elements =
      o.budget > 0
          ? static_cast<int64_t>(std::floor(o.budget * config.num_layers *
                                                SourceCacheElements(shape) +
                                            1e-9))
          : CacheElementsAllLayers(shape, scheme.target());
  const int64_t uniform = scheme.uniform_size();
  const auto cost = [&scheme](int64_t size) { return scheme.CacheCost(size); };
  ASSIGN_OR_RETURN(out.plan,
                   AllocateBudget(out.curves, cost, budget_elements, uniform));
  if (by_loss) {
    // The curves' plan against the uniform one, then moves, by the measured
    // loss of the whole converted model.
    ASSIGN_OR_RETURN(
        out.refinement,
        RefineByJointLoss(out.curves, out.plan.sizes, uniform, cost,
                          budget_elements,
                          [&probes](const std::vector<int64_t>& p) {
                            return probes.PlanLoss(p);
                          }));
    ASSIGN_OR_RETURN(out.plan, AllocationAt(out.curves, out.refinement->sizes,
                                            cost, budget_elements, uniform));
  }
  return out;
}

}  // namespace lrkv
