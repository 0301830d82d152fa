// The dense K/V layout (see dense_layout.h).
#include "runtime/layouts/dense_layout.h"

#include "absl/strings/str_cat.h"
#include "runtime/layers.h"

namespace lrkv {
namespace {

class Dense : public KvLayoutType {
 public:
  void ForEachKvSlot(const ModelConfig& c, int64_t i, LayerWeights& l,
                     const SlotFn& fn) const override {
    const int64_t d = c.hidden_size, kv = c.num_kv_heads * c.head_dim;
    fn(LayerTensorName(i, "self_attn.k_proj.weight"), &l.wk, {kv, d});
    fn(LayerTensorName(i, "self_attn.v_proj.weight"), &l.wv, {kv, d});
    if (c.qkv_bias) {
      fn(LayerTensorName(i, "self_attn.k_proj.bias"), &l.bk, {kv});
      fn(LayerTensorName(i, "self_attn.v_proj.bias"), &l.bv, {kv});
    }
  }

  bool WeightsMatch(const ModelConfig& c, int64_t,
                    const LayerWeights& l) const override {
    return l.wk.defined() && l.wk.size(0) == c.num_kv_heads * c.head_dim;
  }

  void ProjectKv(const ModelConfig&, int64_t, const LayerWeights& l,
                 const at::Tensor& x, at::Tensor* k,
                 at::Tensor* v) const override {
    *k = Linear(x, l.wk, l.bk);
    *v = Linear(x, l.wv, l.bv);
  }

  DenseKv Expand(const ModelConfig&, const LayerWeights& l) const override {
    return {l.wk, l.bk, l.wv, l.bv};
  }

  std::vector<DecodeMode> FactoredModes(const ModelConfig&) const override {
    return {};
  }
  DecodeMode ServingMode(const ModelConfig&) const override {
    return DecodeMode::kExpanded;
  }

  absl::StatusOr<std::unique_ptr<DecodeEngine>> MakeEngine(
      const ModelConfig&, const LlamaWeights&, DecodeMode mode,
      const EngineOptions&) const override {
    return absl::InvalidArgumentError(
        absl::StrCat("mode ", DecodeModeName(mode),
                     " needs a factored (LRKV or MLA) model; a dense ",
                     "model decodes with the expanded engine only"));
  }
};

}  // namespace

const KvLayoutType& DenseLayout() {
  static const Dense layout;
  return layout;
}

}  // namespace lrkv
