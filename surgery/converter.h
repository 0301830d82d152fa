// Converts a model's K/V projections into a target variant (LRKV, GQA, MQA, MLA) at
// an explicit size or at a cache budget, layer by layer, filling a ConversionReport.
#ifndef LRKV_SURGERY_CONVERTER_H_
#define LRKV_SURGERY_CONVERTER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/llama_weights.h"
#include "model/stop_check.h"
#include "surgery/cache_accounting.h"
#include "surgery/calibration.h"
#include "surgery/conversion_options.h"
#include "surgery/conversion_report.h"

namespace lrkv {

struct ConvertedModel {
  ModelConfig config;
  LlamaWeights weights;
};

// Converts a dense (MHA or GQA) model. `calibration` is required for the activation
// metric. `report` (optional) receives the per-layer record. CancelledError when
// `stop` asks (polled per layer).
absl::StatusOr<ConvertedModel> ConvertModel(const ModelConfig& config,
                                            const LlamaWeights& weights,
                                            const ConversionOptions& options,
                                            const CalibrationStats* calibration,
                                            ConversionReport* report,
                                            const StopCheck& stop = {});

// The same model with dense per-KV-head K/V weights materialised from any layout
// (a plain Llama checkpoint that any loader reads).
ConvertedModel ExpandModel(const ModelConfig& config, const LlamaWeights& weights);

}  // namespace lrkv

#endif  // LRKV_SURGERY_CONVERTER_H_
