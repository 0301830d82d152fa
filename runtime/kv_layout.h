// What the runtime knows of each K/V layout a checkpoint stores
// (formats/config.h KvLayout): dense per-head K/V (the source's, GQA, MQA),
// LRKV (a shared projection plus per-head low-rank residuals) and MLA (a latent
// and its up-projections, with or without decoupled RoPE). One type per layout
// (runtime/layouts/) owns its tensors (names and shapes, for loading, checking
// and saving), its K/V projection in the expanded forward, its expansion to
// per-head K/V, and its decode engines; the runtime asks
// KvLayoutTypeOf(config.kv.layout) instead of switching on the layout. The
// surgery's K/V schemes (surgery/kv_scheme.h) produce these layouts; this is
// the runtime's half.
#ifndef LRKV_RUNTIME_KV_LAYOUT_H_
#define LRKV_RUNTIME_KV_LAYOUT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/config.h"
#include "runtime/decode_engine.h"
#include "runtime/llama_weights.h"

namespace lrkv {

class KvLayoutType {
 public:
  virtual ~KvLayoutType() = default;

  // fn(name, slot, shape) for each K/V tensor `layer` stores, in file order (HF
  // names, "model.layers.0.self_attn.k_proj.weight").
  using SlotFn = std::function<void(const std::string& name, at::Tensor* slot,
                                    std::vector<int64_t> shape)>;
  virtual void ForEachKvSlot(const ModelConfig& config, int64_t layer,
                             LayerWeights& weights, const SlotFn& fn) const = 0;

  // Whether the layer's K/V tensors have the shapes `config` gives them.
  virtual bool WeightsMatch(const ModelConfig& config, int64_t layer,
                            const LayerWeights& weights) const = 0;

  // The layer's K and V of x [B, T, d] before RoPE and QK-norm, [B, T, Hkv·dh]
  // (or [B, T, Hkv, dh]), differentiable in the stored tensors.
  virtual void ProjectKv(const ModelConfig& config, int64_t layer,
                         const LayerWeights& weights, const at::Tensor& x,
                         at::Tensor* k, at::Tensor* v) const = 0;

  // The per-head K/V weights the layer stands for. Where the projection is not
  // linear in x (LinearKv false), they are its weights up to a per-token factor
  // every head shares, fit for comparing heads but not for computing K/V.
  virtual DenseKv Expand(const ModelConfig& config,
                         const LayerWeights& weights) const = 0;

  // Whether K and V are linear maps of x (Expand gives them exactly); false for
  // MLA with a latent norm, whose engines then project through ProjectKv.
  virtual bool LinearKv(const ModelConfig&) const { return true; }

  // The factored modes a model of this layout decodes in (verify's "all"); none
  // for dense K/V, which decodes expanded only.
  virtual std::vector<DecodeMode> FactoredModes(
      const ModelConfig& config) const = 0;

  // The mode a model of this layout is served in when none is asked: the one
  // its RoPE mode names for factored layouts, expanded for dense K/V.
  virtual DecodeMode ServingMode(const ModelConfig& config) const = 0;

  // The engine decoding `mode` (not kExpanded, which every layout has) from
  // this layout's own cache; InvalidArgument naming the mode when it does not
  // apply.
  virtual absl::StatusOr<std::unique_ptr<DecodeEngine>> MakeEngine(
      const ModelConfig& config, const LlamaWeights& weights, DecodeMode mode,
      const EngineOptions& options) const = 0;
};

// The type of `layout` (one per KvLayout value, registered in kv_layout.cc).
const KvLayoutType& KvLayoutTypeOf(KvLayout layout);

// "model.layers.3.self_attn.k_proj.weight".
std::string LayerTensorName(int64_t layer, const std::string& rest);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_KV_LAYOUT_H_
