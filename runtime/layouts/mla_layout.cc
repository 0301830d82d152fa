// The MLA layout (see mla_layout.h).
#include "runtime/layouts/mla_layout.h"

#include "absl/strings/str_cat.h"
#include "runtime/engines.h"
#include "runtime/layers.h"

namespace lrkv {
namespace {

class Mla : public KvLayoutType {
 public:
  void ForEachKvSlot(const ModelConfig& c, int64_t i, LayerWeights& l,
                     const SlotFn& fn) const override {
    const int64_t d = c.hidden_size, kv = c.num_kv_heads * c.head_dim;
    if (c.kv.latent_norm) {
      // The latent's RMSNorm, under DeepSeek-V3's name in both layouts.
      fn(LayerTensorName(i, "self_attn.kv_a_layernorm.weight"), &l.kv_norm,
         {c.kv.LatentAt(i)});
    }
    if (c.deepseek_layout) {
      // DeepSeek-V3's fused tensors, held in wq, kv_down and k_up until
      // UnfuseDeepseekAttention splits them (deepseek_layout.h).
      const int64_t w = c.kv.RopeWidth(), dc = c.kv.LatentAt(i);
      fn(LayerTensorName(i, "self_attn.q_proj.weight"), &l.wq,
         {c.num_heads * (c.head_dim + w), d});
      fn(LayerTensorName(i, "self_attn.kv_a_proj_with_mqa.weight"), &l.kv_down,
         {dc + w, d});
      fn(LayerTensorName(i, "self_attn.kv_b_proj.weight"), &l.k_up,
         {c.num_heads * 2 * c.head_dim, dc});
      return;
    }
    fn(LayerTensorName(i, "self_attn.kv_down.weight"), &l.kv_down,
       {c.kv.LatentAt(i), d});
    fn(LayerTensorName(i, "self_attn.k_up.weight"), &l.k_up,
       {kv, c.kv.LatentAt(i)});
    fn(LayerTensorName(i, "self_attn.v_up.weight"), &l.v_up,
       {kv, c.kv.LatentAt(i)});
    if (c.qkv_bias) {
      fn(LayerTensorName(i, "self_attn.k_proj.bias"), &l.bk, {kv});
      fn(LayerTensorName(i, "self_attn.v_proj.bias"), &l.bv, {kv});
    }
    if (c.kv.DecoupledRope()) {
      const int64_t w = c.kv.RopeWidth();
      fn(LayerTensorName(i, "self_attn.k_rope.weight"), &l.k_rope, {w, d});
      fn(LayerTensorName(i, "self_attn.q_rope.weight"), &l.q_rope,
         {c.num_heads * w, d});
      if (c.qkv_bias) {
        fn(LayerTensorName(i, "self_attn.k_rope.bias"), &l.bk_rope, {w});
        fn(LayerTensorName(i, "self_attn.q_rope.bias"), &l.bq_rope,
           {c.num_heads * w});
      }
    }
  }

  bool WeightsMatch(const ModelConfig& c, int64_t layer,
                    const LayerWeights& l) const override {
    bool ok = l.kv_down.defined() && l.kv_down.size(0) == c.kv.LatentAt(layer);
    if (c.kv.latent_norm) {
      ok = ok && l.kv_norm.defined() &&
           l.kv_norm.numel() == c.kv.LatentAt(layer);
    }
    if (c.kv.DecoupledRope()) {
      const int64_t w = c.kv.RopeWidth();
      ok = ok && l.k_rope.defined() && l.k_rope.size(0) == w &&
           l.q_rope.defined() && l.q_rope.size(0) == c.num_heads * w;
    }
    return ok;
  }

  void ProjectKv(const ModelConfig& c, int64_t, const LayerWeights& l,
                 const at::Tensor& x, at::Tensor* k,
                 at::Tensor* v) const override {
    const auto latent = MlaLatent(c, l, x);
    *k = Linear(latent, l.k_up, l.bk);
    *v = Linear(latent, l.v_up, l.bv);
  }

  DenseKv Expand(const ModelConfig& c, const LayerWeights& l) const override {
    DenseKv out;
    // With a latent norm: k_up·diag(γ)·kv_down, the projection up to the
    // token's 1/rms(c_t), which every head shares.
    // kv_down may be held as stored (ForCompute): widened to k_up's dtype.
    const at::Tensor kv_down = AsDtypeOf(l.kv_down, l.k_up);
    const at::Tensor down =
        c.kv.latent_norm
            ? kv_down * l.kv_norm.to(kv_down.scalar_type()).unsqueeze(1)
            : kv_down;
    out.wk = at::matmul(l.k_up, down);
    out.wv = at::matmul(l.v_up, down);
    out.bk = l.bk;
    out.bv = l.bv;
    out.wk_rope = l.k_rope;
    out.bk_rope = l.bk_rope;
    return out;
  }

  bool LinearKv(const ModelConfig& c) const override {
    return !c.kv.latent_norm;
  }

  std::vector<DecodeMode> FactoredModes(const ModelConfig& c) const override {
    return {ServingMode(c)};
  }
  DecodeMode ServingMode(const ModelConfig& c) const override {
    return c.kv.DecoupledRope() ? DecodeMode::kPartial
                                : DecodeMode::kReconstruct;
  }

  absl::StatusOr<std::unique_ptr<DecodeEngine>> MakeEngine(
      const ModelConfig& config, const LlamaWeights& weights, DecodeMode mode,
      const EngineOptions& options) const override {
    const DecodeMode own = ServingMode(config);
    if (mode != own) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mode ", DecodeModeName(mode), " does not apply to ",
          config.kv.DecoupledRope()
              ? "MLA with decoupled RoPE (it decodes in partial mode: the "
                "latent and "
                "the shared rotated key, absorbed)"
              : "MLA (exact MLA decoding with RoPE is reconstruct)"));
    }
    return MakeMlaEngine(config, weights, own, options);
  }
};

}  // namespace

const KvLayoutType& MlaLayout() {
  static const Mla layout;
  return layout;
}

}  // namespace lrkv
