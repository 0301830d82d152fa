// The MLA engine, `reconstruct` mode: caches only the joint latent c_t (d_c per token)
// and rebuilds each head's keys from it per position (QK-norm and RoPE applied after
// the rebuild, so exact); values are read through the absorbed up-projection,
// out_h = (a_h C) W_hᵛᵀ.
#include <cmath>

#include "model/layers.h"
#include "verify/engines.h"

namespace lrkv {
namespace {

class MlaEngine : public DecodeEngine {
 public:
  MlaEngine(const ModelConfig& config, const LlamaWeights& weights,
            const EngineOptions& options)
      : DecodeEngine(config, weights, DecodeMode::kReconstruct, options) {
    for (size_t i = 0; i < weights.layers.size(); ++i) {
      latent_.push_back(NewCache({config.kv.LatentAt(static_cast<int64_t>(i))}));
    }
  }

 protected:
  void Append(int64_t layer, const at::Tensor& x, const RowPositions& at) override {
    Write(latent_[layer], at, Linear(x, weights_.layers[layer].kv_down));
  }

  at::Tensor Attend(int64_t layer, const at::Tensor& q, int64_t pos) override {
    const LayerWeights& l = weights_.layers[layer];
    const int64_t n = pos + 1, b = q.size(0), hkv = config_.num_kv_heads,
                  dh = config_.head_dim, dc = config_.kv.LatentAt(layer);
    // [B, L, dc], in the weights' dtype (float64 for the error model's twins).
    const auto c = Read(latent_[layer], n).to(l.kv_down.scalar_type());
    auto k = Linear(c, l.k_up, l.bk).view({b, n, hkv, dh});        // rebuilt per position
    if (config_.qk_norm) k = QkNorm(config_, k, l.k_norm);
    k = rope(layer).Rotate(k, at::arange(n, at::kLong));
    const auto qr = Grouped(RotateAt(layer, q, pos));
    auto scores = at::einsum("bhgd,blhd->bhgl", {qr, k}) / std::sqrt(static_cast<double>(dh));
    auto probs = at::softmax(scores, -1);
    if (options_.materialize) {
      const auto v = Linear(c, l.v_up, l.bv).view({b, n, hkv, dh});
      return at::einsum("bhgl,blhd->bhgd", {probs, v}).reshape(q.sizes());
    }
    auto pooled = at::einsum("bhgl,blc->bhgc", {probs, c});
    auto out = at::einsum("bhgc,hdc->bhgd", {pooled, l.v_up.view({hkv, dh, dc})});
    if (l.bv.defined()) out = out + l.bv.view({1, hkv, 1, dh});
    return out.reshape(q.sizes());
  }

  std::vector<at::Tensor*> CacheTensors() override {
    std::vector<at::Tensor*> out;
    for (auto& t : latent_) out.push_back(&t);
    return out;
  }

 private:
  std::vector<at::Tensor> latent_;
};

}  // namespace

std::unique_ptr<DecodeEngine> MakeMlaEngine(const ModelConfig& config,
                                            const LlamaWeights& weights,
                                            const EngineOptions& options) {
  return std::make_unique<MlaEngine>(config, weights, options);
}

}  // namespace lrkv
