// Converts a model's K/V projections into a target variant (see converter.h).
#include "surgery/converter.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "surgery/kv_scheme.h"

namespace lrkv {
namespace {

// The tensors a conversion reads from a source layer, in float32 (weights
// loaded in their stored bf16/f16 are widened here, one layer at a time; the
// solvers work in float64 from these exact values).
LayerWeights KvInFloat32(const LayerWeights& l) {
  auto f32 = [](const at::Tensor& t) {
    return t.defined() ? t.to(at::kFloat) : t;
  };
  LayerWeights out;
  out.wk = f32(l.wk);
  out.wv = f32(l.wv);
  out.bk = f32(l.bk);
  out.bv = f32(l.bv);
  out.k_norm = f32(l.k_norm);
  return out;
}

// Source layer i as the schemes read it, whitened under the activation metric.
absl::StatusOr<SourceLayer> ReadSourceLayer(const LlamaWeights& weights,
                                            const ConversionOptions& o,
                                            const CalibrationStats* calibration,
                                            int64_t i) {
  SourceLayer layer;
  layer.index = i;
  layer.stored = &weights.layers[i];
  layer.kv = KvInFloat32(weights.layers[i]);
  if (o.metric == SurgeryMetric::kActivation) {
    ASSIGN_OR_RETURN(
        layer.whitening,
        WhiteningFactor(calibration->gram[i], calibration->tokens, o.damping));
  }
  if (calibration != nullptr &&
      static_cast<int64_t>(calibration->samples.size()) > i) {
    layer.inputs = calibration->samples[i];
  }
  return layer;
}

// The loss of the model as written: the final pass re-solves each layer from
// the S the plan was rated with, so this should match the plan's (up to the
// solver's tolerance).
absl::StatusOr<double> WrittenLoss(const ConvertedModel& model,
                                   const KvLossProbe& probe) {
  std::vector<DenseKv> kv;
  for (const LayerWeights& l : model.weights.layers)
    kv.push_back(ExpandKv(model.config, l));
  return probe(kv);
}

void FillReport(const ModelConfig& config, const KvScheme& scheme,
                const ConversionOptions& o, const CalibrationStats* calibration,
                const std::optional<LayerAllocation>& allocation,
                double written_loss, ConversionReport* report) {
  report->shape = ShapeOf(config);
  report->target = scheme.target();
  report->metric = o.metric;
  report->rope_mode = o.rope_mode;
  report->rope_mode_applies = scheme.converted_config().kv.Factored();
  report->rope_planes_kept = scheme.rope_planes_kept();
  report->latent_norm = scheme.converted_config().kv.latent_norm;
  report->budget = o.budget;
  report->footprint = MeasureFootprint(report->shape, scheme.target(), 1, 1, 1);
  report->calibration_tokens = calibration != nullptr ? calibration->tokens : 0;
  report->damping = o.metric == SurgeryMetric::kActivation ? o.damping : 0;
  report->solver_max_iters = o.max_iters;
  report->solver_tol = o.tol;
  report->allocation = o.allocation;
  report->threads = at::get_num_threads();
  if (!allocation) return;
  const BudgetAllocation& plan = allocation->plan;
  report->allocation_estimated_error = plan.estimated_error;
  report->allocation_uniform_error = plan.uniform_estimated_error;
  report->allocation_budget_elements = plan.budget_elements;
  report->allocation_kept_uniform = plan.uniform;
  report->allocation_objective = allocation->objective;
  report->allocation_curves = allocation->curves;
  report->allocation_source_loss = allocation->source_loss;
  if (const auto& refinement = allocation->refinement) {
    report->allocation_plan_loss = refinement->loss;
    report->allocation_uniform_loss = refinement->uniform_loss;
    report->allocation_curves_plan_loss = refinement->start_loss;
    report->allocation_plans_measured = refinement->evaluations;
    report->allocation_moves = refinement->moves;
    report->allocation_written_loss = written_loss;
  }
}

// Converts every layer at its planned size into `out`, the layers side by side
// on the intra-op threads: each layer's work is independent (a scheme keeps
// per-layer state at the layer's index only), and within one layer the
// decompositions do not fill the cores (LRKV's plane-mode keys converge in a
// few steps, its values in about a hundred). Each thread takes the next layer
// not yet taken; nested parallel regions (K beside V, BLAS) run inline. Rows
// come back in layer order; the first error (in layer order) is returned.
absl::StatusOr<std::vector<LayerReport>> ConvertLayers(
    KvScheme& scheme, int64_t num_layers, const SourceLayerReader& read_layer,
    const StopCheck& stop, const UnitProgress& on_layer, LlamaWeights* out) {
  std::vector<absl::StatusOr<LayerReport>> rows(
      num_layers, absl::InternalError("layer not converted"));
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex progress_mutex;
  int64_t done = 0;
  const int64_t workers = std::min<int64_t>(at::get_num_threads(), num_layers);
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    for (int64_t i = next++; i < num_layers && !failed; i = next++) {
      rows[i] = [&]() -> absl::StatusOr<LayerReport> {
        RETURN_IF_ERROR(
            CheckStop(stop, absl::StrCat("conversion (layer ", i, ")")));
        ASSIGN_OR_RETURN(const SourceLayer layer, read_layer(i));
        return scheme.ConvertLayer(layer, &out->layers[i]);
      }();
      if (!rows[i].ok()) failed = true;
      const std::lock_guard<std::mutex> lock(progress_mutex);
      if (on_layer) on_layer(++done, num_layers);
    }
  });
  std::vector<LayerReport> ok;
  for (auto& row : rows) {
    RETURN_IF_ERROR(row.status());
    ok.push_back(*std::move(row));
  }
  return ok;
}

}  // namespace

absl::StatusOr<ConvertedModel> ConvertModel(
    const ModelConfig& config, const LlamaWeights& weights,
    const ConversionOptions& o, const CalibrationStats* calibration,
    ConversionReport* report, const StopCheck& stop,
    const KvLossProbe& loss_probe, const UnitProgress& on_layer) {
  ASSIGN_OR_RETURN(std::unique_ptr<KvScheme> scheme, MakeKvScheme(config, o));
  return ConvertWithScheme(*scheme, config, weights, o, calibration, report,
                           stop, loss_probe, on_layer);
}

absl::StatusOr<ConvertedModel> ConvertWithScheme(
    KvScheme& scheme, const ModelConfig& config, const LlamaWeights& weights,
    const ConversionOptions& o, const CalibrationStats* calibration,
    ConversionReport* report, const StopCheck& stop,
    const KvLossProbe& loss_probe, const UnitProgress& on_layer) {
  if (o.metric == SurgeryMetric::kActivation &&
      (calibration == nullptr ||
       static_cast<int64_t>(calibration->gram.size()) != config.num_layers)) {
    return absl::InvalidArgumentError(
        "the activation metric needs calibration text (--calib)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  at::NoGradGuard no_grad;
  const SourceLayerReader read_layer = [&](int64_t i) {
    return ReadSourceLayer(weights, o, calibration, i);
  };
  std::optional<LayerAllocation> allocation;
  if (scheme.sized() && o.allocation == SizeAllocation::kLayers) {
    ASSIGN_OR_RETURN(allocation,
                     AllocateLayerSizes(scheme, config, weights, o, read_layer,
                                        stop, loss_probe));
    if (!allocation->plan.uniform) scheme.SetLayerSizes(allocation->plan.sizes);
  }
  ConvertedModel out{scheme.converted_config(), weights};
  ASSIGN_OR_RETURN(std::vector<LayerReport> rows,
                   ConvertLayers(scheme, config.num_layers, read_layer, stop,
                                 on_layer, &out.weights));
  RETURN_IF_ERROR(out.config.Validate());
  double written_loss = 0;
  if (allocation && allocation->refinement) {
    ASSIGN_OR_RETURN(written_loss, WrittenLoss(out, loss_probe));
  }
  if (report != nullptr) {
    FillReport(config, scheme, o, calibration, allocation, written_loss,
               report);
    report->layers = std::move(rows);
    report->wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
  }
  return out;
}

ModelConfig ExpandedConfig(ModelConfig config) {
  // Partial RoPE changes the function; the expanded model keeps that setting.
  config.kv.layout = KvLayout::kDense;
  config.kv.rank = config.kv.latent = 0;
  config.kv.layer_sizes.clear();
  if (RopeModeTraitsOf(config.kv.rope_mode).exact) {
    config.kv.rope_mode = RopeMode::kReconstruct;
  }
  return config;
}

ConvertedModel ExpandModel(const ModelConfig& config,
                           const LlamaWeights& weights) {
  ConvertedModel out{ExpandedConfig(config), weights};
  for (size_t i = 0; i < weights.layers.size(); ++i) {
    DenseKv dense = ExpandKv(config, weights.layers[i]);
    LayerWeights& l = out.weights.layers[i];
    l.wk = dense.wk.contiguous();
    l.wv = dense.wv.contiguous();
    l.bk = dense.bk.defined() ? dense.bk.contiguous() : dense.bk;
    l.bv = dense.bv.defined() ? dense.bv.contiguous() : dense.bv;
    l.k_lr = l.v_lr = LowRankProjection();
    l.kv_down = l.k_up = l.v_up = at::Tensor();
  }
  return out;
}

}  // namespace lrkv
