// Converts a model's K/V projections into a target variant (LRKV, GQA, MQA,
// MLA) at an explicit size or at a cache budget, layer by layer, filling a
// ConversionReport: a driver over the K/V schemes (surgery/kv_scheme.h) and,
// for per-layer sizes, the allocation stage (surgery/layer_allocation.h).
#ifndef LRKV_SURGERY_CONVERTER_H_
#define LRKV_SURGERY_CONVERTER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stop_check.h"
#include "formats/config.h"
#include "runtime/llama_weights.h"
#include "surgery/cache_accounting.h"
#include "surgery/calibration.h"
#include "surgery/conversion_options.h"
#include "surgery/conversion_report.h"
#include "surgery/kv_scheme.h"
#include "surgery/layer_allocation.h"

namespace lrkv {

struct ConvertedModel {
  ModelConfig config;
  LlamaWeights weights;
};

// Converts a dense (MHA or GQA) model. `calibration` is required for the
// activation metric, `loss_probe` for the loss objective of per-layer sizes.
// `report` (optional) receives the per-layer record. CancelledError when `stop`
// asks (polled per layer).
absl::StatusOr<ConvertedModel> ConvertModel(
    const ModelConfig& config, const LlamaWeights& weights,
    const ConversionOptions& options, const CalibrationStats* calibration,
    ConversionReport* report, const StopCheck& stop = {},
    const KvLossProbe& loss_probe = {}, const UnitProgress& on_layer = {});

// The conversion through `scheme` (made for `config` and `options`, by
// MakeKvScheme or by the caller): ConvertModel is MakeKvScheme, then this.
absl::StatusOr<ConvertedModel> ConvertWithScheme(
    KvScheme& scheme, const ModelConfig& config, const LlamaWeights& weights,
    const ConversionOptions& options, const CalibrationStats* calibration,
    ConversionReport* report, const StopCheck& stop = {},
    const KvLossProbe& loss_probe = {}, const UnitProgress& on_layer = {});

// The same model with dense per-KV-head K/V weights materialised from any
// layout (a plain Llama checkpoint that any loader reads).
ConvertedModel ExpandModel(const ModelConfig& config,
                           const LlamaWeights& weights);

// ExpandModel's config alone: dense K/V, exact RoPE unless partial.
ModelConfig ExpandedConfig(ModelConfig config);

}  // namespace lrkv

#endif  // LRKV_SURGERY_CONVERTER_H_
