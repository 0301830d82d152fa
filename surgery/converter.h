// Converts a model's K/V projections into a target variant (LRKV, GQA, MQA, MLA) at
// an explicit size or at a cache budget, layer by layer, filling a ConversionReport.
#ifndef LRKV_SURGERY_CONVERTER_H_
#define LRKV_SURGERY_CONVERTER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "runtime/llama_weights.h"
#include "base/stop_check.h"
#include "surgery/cache_accounting.h"
#include "surgery/calibration.h"
#include "surgery/conversion_options.h"
#include "surgery/conversion_report.h"

namespace lrkv {

struct ConvertedModel {
  ModelConfig config;
  LlamaWeights weights;
};

// The mean loss (nats per predicted token) on calibration text of the source model
// with each layer's K/V replaced by kv[layer] (dense per-KV-head weights; a layer kept
// as it is gets its own). Per-layer sizes by loss call it per layer and candidate
// size, then per plan tried. The converter knows no text: the caller owns the model
// and the documents (surgery/convert_job.cc).
using KvLossProbe = std::function<absl::StatusOr<double>(const std::vector<DenseKv>& kv)>;

// Converts a dense (MHA or GQA) model. `calibration` is required for the activation
// metric, `loss_probe` for the loss objective of per-layer sizes. `report` (optional)
// receives the per-layer record. CancelledError when `stop` asks (polled per layer).
absl::StatusOr<ConvertedModel> ConvertModel(const ModelConfig& config,
                                            const LlamaWeights& weights,
                                            const ConversionOptions& options,
                                            const CalibrationStats* calibration,
                                            ConversionReport* report,
                                            const StopCheck& stop = {},
                                            const KvLossProbe& loss_probe = {});

// The same model with dense per-KV-head K/V weights materialised from any layout
// (a plain Llama checkpoint that any loader reads).
ConvertedModel ExpandModel(const ModelConfig& config, const LlamaWeights& weights);

}  // namespace lrkv

#endif  // LRKV_SURGERY_CONVERTER_H_
