// The MLA engine. `reconstruct` mode caches only the joint latent c_t (d_c per
// token) and rebuilds each head's keys from it per position (QK-norm and RoPE
// applied after the rebuild, so exact); values are read through the absorbed
// up-projection, out_h = (a_h C) W_hᵛᵀ. `partial` mode (decoupled RoPE, the
// DeepSeek layout) caches c_t and the shared rotated key k_t (rotated at write
// time) and attends absorbed, as FlashMLA does: s_h(t) = (q_h W_hᵏ)·c_t +
// q_h,rope·k_t, through the factored decode kernel (one shared "KV head" of
// width d_c, the rotated key as its rank-w latent). With a latent norm the
// cache holds the normalised latent (MlaLatent), the rest unchanged.
#include <cmath>

#include "kernels/decode_attention.h"
#include "runtime/engines.h"
#include "runtime/layers.h"

namespace lrkv {
namespace {

class MlaEngine : public DecodeEngine {
 public:
  MlaEngine(const ModelConfig& config, const LlamaWeights& weights,
            DecodeMode mode, const EngineOptions& options)
      : DecodeEngine(config, weights, mode, options) {
    for (size_t i = 0; i < weights.layers.size(); ++i) {
      latent_.push_back(
          NewCache({config.kv.LatentAt(static_cast<int64_t>(i))}));
      if (config.kv.DecoupledRope())
        rope_key_.push_back(NewCache({config.kv.RopeWidth()}));
    }
  }

 protected:
  void Append(int64_t layer, const at::Tensor& x,
              const RowPositions& at) override {
    const LayerWeights& l = weights_.layers[layer];
    Write(latent_[layer], at, NormedLatent(config_, l, SlotLinear(x, l.kv_down)));
    if (!config_.kv.DecoupledRope()) return;
    auto k = SlotLinear(x, l.k_rope, l.bk_rope).unsqueeze(1);  // [R, 1, w]
    if (options_.fault == DecodeFault::kWrongPlane) {
      // Negative control: every pair turned with the next plane's frequency.
      const int64_t w = k.size(-1);
      auto shifted = RotateLeadingAt(
          layer, at::cat({at::zeros_like(k.narrow(-1, 0, 2)), k}, -1), at);
      Write(rope_key_[layer], at, shifted.narrow(-1, 2, w).squeeze(1));
      return;
    }
    Write(rope_key_[layer], at, RotateLeadingAt(layer, k, at).squeeze(1));
  }

  at::Tensor Attend(int64_t layer, const at::Tensor& q, int64_t pos) override {
    if (config_.kv.DecoupledRope()) return AttendDecoupled(layer, q, pos);
    const LayerWeights& l = weights_.layers[layer];
    const int64_t n = pos + 1, b = q.size(0), hkv = config_.num_kv_heads,
                  dh = config_.head_dim, dc = config_.kv.LatentAt(layer);
    // [B, L, dc], in the weights' dtype (float64 for the error model's twins).
    const auto c = Read(latent_[layer], n).to(l.k_up.scalar_type());
    auto k =
        Linear(c, l.k_up, l.bk).view({b, n, hkv, dh});  // rebuilt per position
    if (config_.qk_norm) k = QkNorm(config_, k, l.k_norm);
    k = rope(layer).Rotate(k, at::arange(n, at::kLong));
    const auto qr = Grouped(RotateAt(layer, q, pos));
    auto scores = at::einsum("bhgd,blhd->bhgl", {qr, k}) /
                  std::sqrt(static_cast<double>(dh));
    auto probs = at::softmax(scores, -1);
    if (options_.materialize) {
      const auto v = Linear(c, l.v_up, l.bv).view({b, n, hkv, dh});
      return at::einsum("bhgl,blhd->bhgd", {probs, v}).reshape(q.sizes());
    }
    auto pooled = at::einsum("bhgl,blc->bhgc", {probs, c});
    auto out =
        at::einsum("bhgc,hdc->bhgd", {pooled, l.v_up.view({hkv, dh, dc})});
    if (l.bv.defined()) out = out + l.bv.view({1, hkv, 1, dh});
    return out.reshape(q.sizes());
  }

  std::vector<at::Tensor*> CacheTensors() override {
    std::vector<at::Tensor*> out;
    for (auto& t : latent_) out.push_back(&t);
    for (auto& t : rope_key_) out.push_back(&t);
    return out;
  }

 private:
  // Decoupled RoPE. materialize: per-head keys [k_up c + b_k | k_t] and values
  // rebuilt from the cache, standard attention; otherwise absorbed, through the
  // kernel (fp32/bf16 caches) or ATen (the float64 twin, or kernels off). The
  // key bias adds q_h·b_k to every score of head h alike, which softmax
  // ignores: the absorbed paths leave it out.
  at::Tensor AttendDecoupled(int64_t layer, const at::Tensor& q, int64_t pos) {
    const LayerWeights& l = weights_.layers[layer];
    const int64_t n = pos + 1, b = q.size(0), h = config_.num_heads,
                  hkv = config_.num_kv_heads, dh = config_.head_dim,
                  dc = config_.kv.LatentAt(layer), w = config_.kv.RopeWidth();
    const auto qr = RotateQuery(layer, q, {pos, false});  // [B, H, dh + w]
    const auto q_nope = Grouped(qr.narrow(-1, 0, dh));    // [B, Hkv, g, dh]
    const auto q_rope = qr.narrow(-1, dh, w);             // [B, H, w]
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    const auto dtype = l.k_up.scalar_type();
    const auto k_up = l.k_up.view({hkv, dh, dc}),
               v_up = l.v_up.view({hkv, dh, dc});
    if (options_.materialize) {
      const auto c = Read(latent_[layer], n).to(dtype);
      auto k = Linear(c, l.k_up, l.bk).view({b, n, hkv, dh});
      const auto kr = Read(rope_key_[layer], n).to(dtype);  // [B, L, w]
      k = at::cat({k, kr.unsqueeze(2).expand({b, n, hkv, w})}, -1);
      const auto v = Linear(c, l.v_up, l.bv).view({b, n, hkv, dh});
      const auto probs = at::softmax(
          at::einsum("bhgd,blhd->bhgl", {Grouped(qr), k}) * scale, -1);
      return at::einsum("bhgl,blhd->bhgd", {probs, v}).reshape({b, h, dh});
    }
    // Each head's query absorbed into the latent: [B, H, dc].
    const auto q_latent =
        at::einsum("bhgd,hdc->bhgc", {q_nope, k_up}).reshape({b, h, dc});
    at::Tensor pooled;  // a · C, [B, H, dc]
    if (options_.kernels && options_.cache_dtype != at::kDouble) {
      const auto qc = q_latent.to(at::kFloat).contiguous();
      const auto qp = q_rope.to(at::kFloat).contiguous();
      pooled = at::empty({b, h, dc}, at::kFloat);
      auto unused = at::empty({b, h, w}, at::kFloat);  // a · K_rope, not needed
      kernels::FactoredDecodeParams p;
      p.batch = b;
      p.heads = h;
      p.kv_heads = 1;
      p.dim = dc;
      p.rank = w;
      p.length = n;
      p.capacity = capacity();
      p.dtype = KernelCacheDType();
      p.layout = kernels::CacheLayout::kRows;
      p.k = p.v = {latent_[layer].data_ptr(), dc};
      p.zk = p.zv = {rope_key_[layer].data_ptr(), w};
      p.q = qc.data_ptr<float>();
      p.q_latent = qp.data_ptr<float>();
      p.scale = static_cast<float>(scale);
      p.out = pooled.data_ptr<float>();
      p.out_latent = unused.data_ptr<float>();
      const absl::Status st = kernels::FactoredDecode(p);
      TORCH_CHECK(st.ok(),
                  "absorbed MLA decode kernel: ", std::string(st.message()));
      pooled = pooled.to(dtype);
    } else {
      const auto c = Read(latent_[layer], n).to(dtype);     // [B, L, dc]
      const auto kr = Read(rope_key_[layer], n).to(dtype);  // [B, L, w]
      const auto scores = (at::einsum("bhc,blc->bhl", {q_latent, c}) +
                           at::einsum("bhr,blr->bhl", {q_rope, kr})) *
                          scale;
      pooled = at::einsum("bhl,blc->bhc", {at::softmax(scores, -1), c});
    }
    auto out = at::einsum("bhgc,hdc->bhgd", {Grouped(pooled), v_up});
    if (l.bv.defined()) out = out + l.bv.view({1, hkv, 1, dh});
    return out.reshape({b, h, dh});
  }

  std::vector<at::Tensor> latent_;
  std::vector<at::Tensor>
      rope_key_;  // decoupled RoPE: [B, capacity, w], rotated
};

}  // namespace

std::unique_ptr<DecodeEngine> MakeMlaEngine(const ModelConfig& config,
                                            const LlamaWeights& weights,
                                            DecodeMode mode,
                                            const EngineOptions& options) {
  return std::make_unique<MlaEngine>(config, weights, mode, options);
}

}  // namespace lrkv
