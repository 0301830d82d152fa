// One type per K/V scheme a conversion can target (docs/design.md): the
// source's own expanded attention, GQA/MQA pooled heads, MLA exact and with
// decoupled RoPE, LRKV in reconstruct/plane/partial RoPE and LRKV with shared
// planes. A scheme owns what its variant means to a conversion: the target
// resolved from the options (once), the converted model's config, the size a
// per-layer allocation varies and the cache it costs, the layer's error or loss
// curve, and the decomposition of one layer with its report row. ConvertModel
// (converter.cc) drives the schemes; the allocation stage (layer_allocation.h)
// runs over them. A new scheme is a file pair under schemes/ and a line in
// kv_scheme.cc's registry.
#ifndef LRKV_SURGERY_KV_SCHEME_H_
#define LRKV_SURGERY_KV_SCHEME_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/config.h"
#include "runtime/llama_weights.h"
#include "surgery/budget_allocation.h"
#include "surgery/cache_accounting.h"
#include "surgery/conversion_options.h"
#include "surgery/conversion_report.h"

namespace lrkv {

// What a scheme reads of one source layer.
struct SourceLayer {
  int64_t index = 0;
  // The layer as loaded (decoupled RoPE reads its queries).
  const LayerWeights* stored = nullptr;
  // Its K/V weights, biases and key norm in float32 (the solvers widen to
  // float64).
  LayerWeights kv;
  // L of the activation metric's whitening; undefined for the weight metric.
  at::Tensor whitening;
  // Calibration attention inputs [n, d] (CalibrationStats::samples), or
  // undefined.
  at::Tensor inputs;
};

// The loss change of the model with one layer alone converted to `candidate` at
// `size`; the allocation stage keeps the candidate for the plans it measures.
using CandidateLoss =
    std::function<absl::StatusOr<double>(int64_t size, LayerWeights candidate)>;

// What every scheme is made from.
struct SchemeSetup {
  const ModelConfig* source = nullptr;
  const ConversionOptions* options = nullptr;
  // The target as ResolveTarget resolved it (explicit size or budget).
  KvConfig target;
  // RopePlanesKept(source, options).
  int64_t rope_planes_kept = 0;
};

class KvScheme {
 public:
  explicit KvScheme(const SchemeSetup& setup);
  virtual ~KvScheme() = default;
  KvScheme(const KvScheme&) = delete;
  KvScheme& operator=(const KvScheme&) = delete;

  // The resolved target, with per-layer sizes once SetLayerSizes gave them.
  const KvConfig& target() const { return target_; }
  // The converted model's config (layout, sizes, RoPE mode).
  const ModelConfig& converted_config() const { return converted_; }
  int64_t rope_planes_kept() const { return kept_; }

  // Whether a per-layer allocation can vary this scheme's size (LRKV rank, MLA
  // latent).
  virtual bool sized() const { return false; }
  // Whether a candidate layer expands to dense K/V that a loss probe can run
  // (decoupled-RoPE MLA's keys do not fit a dense layout).
  virtual bool probes_loss_densely() const { return true; }
  // The uniform size, as resolved (sized schemes; 0 otherwise).
  int64_t uniform_size() const;
  // Cache elements per token of one layer at `size`.
  int64_t CacheCost(int64_t size) const;
  // Layer `layer`'s size: the uniform one, or the allocation's.
  int64_t LayerSize(int64_t layer) const;
  // Gives each layer its size (sized schemes); the largest becomes the config's
  // size.
  void SetLayerSizes(const std::vector<int64_t>& sizes);

  // The layer's curve over sizes around the uniform one: the decomposition's
  // objective at each, or with `loss` each candidate's loss change. Sized
  // schemes only.
  virtual absl::StatusOr<LayerErrorCurve> Curve(const SourceLayer& layer,
                                                const CandidateLoss* loss);
  // Converts one layer at LayerSize into `out` (a copy of the source layer):
  // the target's tensors set, the source's K/V ones cleared. Returns the
  // layer's report row.
  virtual absl::StatusOr<LayerReport> ConvertLayer(const SourceLayer& layer,
                                                   LayerWeights* out) = 0;

 protected:
  // The size field of a KvConfig and of the converted ModelConfig (sized
  // schemes; a layout without per-layer sizes in its config answers null for
  // the latter).
  virtual int64_t* SizeOf(KvConfig* c) const;
  virtual int64_t* SizeOf(ModelConfig* c) const;

  const ModelConfig& source_;
  const ConversionOptions& options_;
  // The target as resolved (uniform), and as converted (with per-layer sizes).
  const KvConfig resolved_;
  KvConfig target_;
  ModelConfig converted_;
  const int64_t kept_;
};

// The scheme of the conversion `options` asks of `config`: the target resolved
// (InvalidArgument naming the option and its valid range) and the scheme
// registered for its variant and RoPE mode.
absl::StatusOr<std::unique_ptr<KvScheme>> MakeKvScheme(
    const ModelConfig& config, const ConversionOptions& options);

}  // namespace lrkv

#endif  // LRKV_SURGERY_KV_SCHEME_H_
