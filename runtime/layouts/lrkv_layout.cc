// The LRKV layout (see lrkv_layout.h).
#include "runtime/layouts/lrkv_layout.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/engines.h"
#include "runtime/layers.h"

namespace lrkv {
namespace {

class Lrkv : public KvLayoutType {
 public:
  void ForEachKvSlot(const ModelConfig& c, int64_t i, LayerWeights& l,
                     const SlotFn& fn) const override {
    const int64_t d = c.hidden_size, kv = c.num_kv_heads * c.head_dim;
    const int64_t r = c.kv.RankAt(i), hkv = c.num_kv_heads, dh = c.head_dim;
    for (auto [p, lr] : {std::pair{"k", &l.k_lr}, {"v", &l.v_lr}}) {
      const std::string base = absl::StrCat("self_attn.", p);
      // Shared-plane K: its H_kv·r latents are shared by every head.
      const int64_t up_cols =
          c.kv.rope_mode == RopeMode::kSharedPlane && lr == &l.k_lr ? hkv * r
                                                                    : r;
      fn(LayerTensorName(i, base + "_shared.weight"), &lr->shared, {dh, d});
      fn(LayerTensorName(i, base + "_down.weight"), &lr->down, {hkv * r, d});
      fn(LayerTensorName(i, base + "_up.weight"), &lr->up, {hkv, dh, up_cols});
      if (c.qkv_bias) {
        fn(LayerTensorName(i, base + "_shared.bias"), &lr->shared_bias, {dh});
        fn(LayerTensorName(i, base + "_head_bias"), &lr->head_bias, {kv});
      }
    }
  }

  bool WeightsMatch(const ModelConfig& c, int64_t layer,
                    const LayerWeights& l) const override {
    return l.k_lr.up.defined() && l.v_lr.up.defined() &&
           l.k_lr.up.size(2) == (c.kv.rope_mode == RopeMode::kSharedPlane
                                     ? c.num_kv_heads * c.kv.RankAt(layer)
                                     : c.kv.RankAt(layer)) &&
           l.v_lr.up.size(2) == c.kv.RankAt(layer);
  }

  void ProjectKv(const ModelConfig& c, int64_t layer, const LayerWeights& l,
                 const at::Tensor& x, at::Tensor* k,
                 at::Tensor* v) const override {
    // Expanded from the factors (differentiable in S, U, B): k_h = x S + (x
    // U_h) B_hᵀ.
    const int64_t b = x.size(0), t = x.size(1), hkv = c.num_kv_heads;
    const int64_t r = c.kv.RankAt(layer);
    auto project = [&](const LowRankProjection& p) {
      auto shared =
          Linear(x, p.shared, p.shared_bias).unsqueeze(2);  // [B,T,1,dh]
      // Shared-plane K: one set of latents that every head reads (up [Hkv, dh,
      // Hkv·r]).
      const bool one_set = p.down.size(0) == p.up.size(2) && hkv > 1;
      auto z = Linear(x, p.down);
      auto out =
          one_set
              ? shared + at::einsum("btr,hdr->bthd", {z, AsDtypeOf(p.up, z)})
              : shared + at::einsum("bthr,hdr->bthd", {z.view({b, t, hkv, r}),
                                                       AsDtypeOf(p.up, z)});
      if (p.head_bias.defined())
        out = out + p.head_bias.view({hkv, c.head_dim});
      return out;
    };
    *k = project(l.k_lr);
    *v = project(l.v_lr);
  }

  DenseKv Expand(const ModelConfig& c, const LayerWeights& l) const override {
    DenseKv out;
    const int64_t hkv = c.num_kv_heads, dh = c.head_dim;
    auto expand = [&](const LowRankProjection& p, at::Tensor* w,
                      at::Tensor* b) {
      const int64_t d = p.shared.size(1), r = p.up.size(2);
      // W_hᵀ = Sᵀ + B_h U_hᵀ for every head at once: [Hkv, dh, r] @ [Hkv, r,
      // d], in float64 and rounded once: the shared and residual parts can be
      // large and cancel (healing grows both), and the expanded weights are the
      // reference the factored engines are checked against.
      const auto f64 = at::kDouble;
      // Per-head latents [Hkv, r, d], or (shared-plane K) one set every head
      // reads.
      const bool shared = p.down.size(0) == r;
      auto residual =
          shared ? at::matmul(p.up.to(f64), p.down.to(f64))
                 : at::matmul(p.up.to(f64), p.down.view({hkv, r, d}).to(f64));
      // In the dtype of the up-projection, which ForCompute widens to the
      // compute dtype (the shared and down matrices may stay as stored).
      *w = (p.shared.to(f64).unsqueeze(0) + residual)
               .reshape({hkv * dh, d})
               .to(p.up.scalar_type());
      if (p.shared_bias.defined()) {
        *b = (p.shared_bias.unsqueeze(0) + p.head_bias.view({hkv, dh}))
                 .reshape({-1});
      }
    };
    expand(l.k_lr, &out.wk, &out.bk);
    expand(l.v_lr, &out.wv, &out.bv);
    return out;
  }

  // The engine named as the model's RoPE mode (every one has its own).
  DecodeMode ServingMode(const ModelConfig& c) const override {
    return *ParseDecodeMode(RopeModeName(c.kv.rope_mode));
  }

  std::vector<DecodeMode> FactoredModes(const ModelConfig& c) const override {
    if (c.kv.rope_mode == RopeMode::kSharedPlane)
      return {DecodeMode::kSharedPlane};
    std::vector<DecodeMode> modes = {DecodeMode::kReconstruct,
                                     DecodeMode::kPlane, DecodeMode::kPartial};
    // Naive decoding (RoPE applied as if it commuted with the residual) is
    // verify's negative control; at rank 0 in every layer there is no residual
    // for it to get wrong, so it is no control there (measured: the
    // Qwen2.5-0.5B shape at budget 0.5, H_kv = 2, converts to r = 0).
    bool residual = false;
    for (int64_t i = 0; i < c.num_layers; ++i) residual |= c.kv.RankAt(i) > 0;
    if (residual) modes.push_back(DecodeMode::kNaive);
    return modes;
  }

  absl::StatusOr<std::unique_ptr<DecodeEngine>> MakeEngine(
      const ModelConfig& config, const LlamaWeights& weights, DecodeMode mode,
      const EngineOptions& options) const override {
    // A shared-plane model's K latents are shared by the heads: it decodes in
    // its own mode only (and only it decodes in that mode).
    if ((config.kv.rope_mode == RopeMode::kSharedPlane) !=
        (mode == DecodeMode::kSharedPlane)) {
      return absl::InvalidArgumentError(
          mode == DecodeMode::kSharedPlane
              ? "shared-plane mode needs a model converted with --rope-mode "
                "shared-plane"
              : absl::StrCat("mode ", DecodeModeName(mode),
                             " does not apply to a shared-plane LRKV model "
                             "(its K latents "
                             "are shared by the heads; it decodes in "
                             "shared-plane mode)"));
    }
    if (mode == DecodeMode::kSharedPlane)
      return MakeSharedPlaneEngine(config, weights, options);
    return MakeLrkvEngine(config, weights, mode, options);
  }
};

}  // namespace

const KvLayoutType& LrkvLayout() {
  static const Lrkv layout;
  return layout;
}

}  // namespace lrkv
