// The expanded engine: a standard per-KV-head cache of post-QK-norm, post-RoPE keys
// and values. Serves MHA, GQA and MQA models, and LRKV/MLA models through their
// materialised per-head projections (the reference for the factored engines).
#include <cmath>

#include "model/layers.h"
#include "verify/engines.h"

namespace lrkv {
namespace {

class ExpandedEngine : public DecodeEngine {
 public:
  ExpandedEngine(const ModelConfig& config, const LlamaWeights& weights,
                 const EngineOptions& options)
      : DecodeEngine(config, weights, DecodeMode::kExpanded, options) {
    for (const auto& l : weights.layers) {
      dense_.push_back(ExpandKv(config, l));
      k_.push_back(NewCache({config.num_kv_heads, config.head_dim}));
      v_.push_back(NewCache({config.num_kv_heads, config.head_dim}));
    }
  }

 protected:
  void Append(int64_t layer, const at::Tensor& x, int64_t pos) override {
    const DenseKv& kv = dense_[layer];
    const int64_t b = x.size(0), hkv = config_.num_kv_heads, dh = config_.head_dim;
    auto k = Linear(x, kv.wk, kv.bk).view({b, hkv, dh});
    if (config_.qk_norm) {
      k = RmsNorm(k, weights_.layers[layer].k_norm, config_.rms_norm_eps);
    }
    Write(k_[layer], pos, RotateAt(k, pos));
    Write(v_[layer], pos, Linear(x, kv.wv, kv.bv).view({b, hkv, dh}));
  }

  at::Tensor Attend(int64_t layer, const at::Tensor& q, int64_t pos) override {
    const int64_t n = pos + 1;
    const auto qr = Grouped(RotateAt(q, pos));  // [B, Hkv, g, dh]
    const auto k = Read(k_[layer], n), v = Read(v_[layer], n);  // [B, L, Hkv, dh]
    auto scores = at::einsum("bhgd,blhd->bhgl", {qr, k}) /
                  std::sqrt(static_cast<double>(config_.head_dim));
    auto probs = at::softmax(scores, -1);
    return at::einsum("bhgl,blhd->bhgd", {probs, v}).reshape(q.sizes());
  }

  std::vector<at::Tensor*> CacheTensors() override {
    std::vector<at::Tensor*> out;
    for (auto& t : k_) out.push_back(&t);
    for (auto& t : v_) out.push_back(&t);
    return out;
  }

 private:
  std::vector<DenseKv> dense_;
  std::vector<at::Tensor> k_, v_;
};

}  // namespace

std::unique_ptr<DecodeEngine> MakeExpandedEngine(const ModelConfig& config,
                                                 const LlamaWeights& weights,
                                                 const EngineOptions& options) {
  return std::make_unique<ExpandedEngine>(config, weights, options);
}

}  // namespace lrkv
