// The expanded engine: a standard per-KV-head cache of post-QK-norm, post-RoPE
// keys and values. Serves MHA, GQA and MQA models, and LRKV/MLA models through
// their materialised per-head projections (the reference for the factored
// engines).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/decode_attention.h"
#include "runtime/engines.h"
#include "runtime/kv_layout.h"
#include "runtime/layers.h"

namespace lrkv {
namespace {

class ExpandedEngine : public DecodeEngine {
 public:
  ExpandedEngine(const ModelConfig& config, const LlamaWeights& weights,
                 const EngineOptions& options)
      : DecodeEngine(config, weights, DecodeMode::kExpanded, options),
        layout_(KvLayoutTypeOf(config.kv.layout)),
        linear_(layout_.LinearKv(config)) {
    for (const auto& l : weights.layers) {
      dense_.push_back(ExpandKv(config, l));
      k_.push_back(NewCache(
          {config.num_kv_heads, config.head_dim + config.kv.RopeWidth()}));
      v_.push_back(NewCache({config.num_kv_heads, config.head_dim}));
    }
  }

 protected:
  void Append(int64_t layer, const at::Tensor& x,
              const RowPositions& at) override {
    const DenseKv& kv = dense_[layer];
    const int64_t b = x.size(0), hkv = config_.num_kv_heads,
                  dh = config_.head_dim;
    at::Tensor k, v;
    if (linear_) {
      k = SlotLinear(x, kv.wk, kv.bk);
      v = SlotLinear(x, kv.wv, kv.bv);
    } else {
      // K/V not linear in x (MLA's latent norm): the layout's own projection.
      layout_.ProjectKv(config_, layer, weights_.layers[layer], x, &k, &v);
    }
    k = k.reshape({b, hkv, dh});
    v = v.reshape({b, hkv, dh});
    if (config_.qk_norm) {
      k = QkNorm(config_, k, weights_.layers[layer].k_norm);
    }
    if (config_.kv.DecoupledRope()) {
      // [RoPE-free key | the shared rotated key], per KV head.
      const auto shared = RotateLeadingAt(
          layer, SlotLinear(x, kv.wk_rope, kv.bk_rope).view({b, 1, -1}), at);
      Write(k_[layer], at,
            at::cat({k, shared.expand({b, hkv, shared.size(2)})}, -1));
      Write(v_[layer], at, v);
      return;
    }
    Write(k_[layer], at, RotateAt(layer, k, at));
    Write(v_[layer], at, v);
  }

  at::Tensor Attend(int64_t layer, const at::Tensor& q, int64_t pos) override {
    // Keys wider than values (decoupled RoPE) have no MHA kernel: ATen.
    if (options_.materialize || !options_.kernels ||
        config_.kv.DecoupledRope()) {
      return AttendAten(layer, q, pos);
    }
    // Through the fused CPU kernel (kernels/), reading the position-major
    // cache.
    const auto qr = QueryForKeys(RotateAt(layer, q, pos)).contiguous();
    kernels::MhaDecodeParams p = KernelParams(qr, pos + 1);
    p.capacity = k_[layer].size(1);
    p.k = k_[layer].data_ptr();
    p.v = v_[layer].data_ptr();
    return RunKernel(p, qr);
  }

  // The kernel over every engine's own cache at once (MhaDecodeParams'
  // per-sequence caches), where each is an expanded engine of these options.
  at::Tensor AttendTogether(int64_t layer,
                            const std::vector<DecodeEngine*>& engines,
                            const at::Tensor& q,
                            const std::vector<int64_t>& positions) override {
    if (options_.materialize || !options_.kernels ||
        config_.kv.DecoupledRope()) {
      return {};
    }
    std::vector<const void*> k_seqs, v_seqs;
    std::vector<int64_t> lengths;
    for (size_t i = 0; i < engines.size(); ++i) {
      const auto* e = dynamic_cast<const ExpandedEngine*>(engines[i]);
      if (e == nullptr || e->options_.cache_dtype != options_.cache_dtype ||
          e->options_.cache_blocks != options_.cache_blocks ||
          e->options_.batch != 1 || e->options_.materialize ||
          !e->options_.kernels) {
        return {};
      }
      k_seqs.push_back(e->k_[layer].data_ptr());
      v_seqs.push_back(e->v_[layer].data_ptr());
      lengths.push_back(positions[i] + 1);
    }
    const auto qr =
        QueryForKeys(RotateEachAt(layer, q, positions)).contiguous();
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    kernels::MhaDecodeParams p = KernelParams(qr, longest);
    p.capacity = longest;
    p.k_seqs = k_seqs.data();
    p.v_seqs = v_seqs.data();
    p.lengths = lengths.data();
    return RunKernel(p, qr);
  }

  // The kernel's shape, cache dtype and scale for the rotated queries qr [B, H,
  // d_h] over `length` positions; the caller sets the caches.
  kernels::MhaDecodeParams KernelParams(const at::Tensor& qr,
                                        int64_t length) const {
    kernels::MhaDecodeParams p;
    p.batch = qr.size(0);
    p.heads = config_.num_heads;
    p.kv_heads = config_.num_kv_heads;
    p.head_dim = config_.head_dim;
    p.length = length;
    p.position_major = true;
    p.dtype = KernelCacheDType();
    p.scale = static_cast<float>(
        1.0 / std::sqrt(static_cast<double>(config_.head_dim)));
    return p;
  }

  // MhaDecode of p for the queries qr: [B, H, d_h].
  static at::Tensor RunKernel(kernels::MhaDecodeParams& p,
                              const at::Tensor& qr) {
    auto out = at::empty(qr.sizes(), at::kFloat);
    p.q = qr.data_ptr<float>();
    p.out = out.data_ptr<float>();
    const absl::Status st = kernels::MhaDecode(p);
    TORCH_CHECK(st.ok(), "MHA decode kernel: ", std::string(st.message()));
    return out;
  }

  // The same attention with ATen operations (materialize = true).
  at::Tensor AttendAten(int64_t layer, const at::Tensor& q, int64_t pos) {
    const int64_t n = pos + 1;
    const auto qr = Grouped(
        QueryForKeys(RotateQuery(layer, q, {pos, false})));  // [B, Hkv, g, dq]
    const auto k = Read(k_[layer], n),
               v = Read(v_[layer], n);  // [B, L, Hkv, dq | dh]
    auto scores = at::einsum("bhgd,blhd->bhgl", {qr, k}) /
                  std::sqrt(static_cast<double>(config_.head_dim));
    auto probs = at::softmax(scores, -1);
    return at::einsum("bhgl,blhd->bhgd", {probs, v})
        .reshape({q.size(0), config_.num_heads, config_.head_dim});
  }

  // A prefill's rows attend causally in one product per chunk of rows (the
  // cache read once per chunk, not once per row), through ATen: the same
  // scores, softmax and sums as AttendAten for each row, over its own positions
  // only.
  at::Tensor AttendRows(int64_t layer, const at::Tensor& q,
                        const RowPositions& at) override {
    if (!at.consecutive || q.size(0) == 1)
      return DecodeEngine::AttendRows(layer, q, at);
    const int64_t rows = q.size(0), n = at.pos + rows, dh = config_.head_dim;
    const auto qr =
        Grouped(QueryForKeys(RotateQuery(layer, q, at)));  // [T, Hkv, g, dq]
    const auto k = Read(k_[layer], n)[0],
               v = Read(v_[layer], n)[0];  // [L, Hkv, dh]
    const int64_t chunk = PrefillRowChunk(n);
    std::vector<at::Tensor> parts;
    for (int64_t t0 = 0; t0 < rows; t0 += chunk) {
      const int64_t m = std::min(chunk, rows - t0);
      auto scores = at::einsum("thgd,lhd->hgtl", {qr.narrow(0, t0, m), k}) /
                    std::sqrt(static_cast<double>(dh));
      scores.masked_fill_(
          FuturePositions(at.pos + t0, m, n),  // [m, L] against [.., m, L]
          -std::numeric_limits<double>::infinity());
      const auto probs = at::softmax(scores, -1);
      parts.push_back(at::einsum("hgtl,lhd->thgd", {probs, v}));
    }
    return at::cat(parts, 0).reshape({rows, config_.num_heads, dh});
  }

  std::vector<at::Tensor*> CacheTensors() override {
    std::vector<at::Tensor*> out;
    for (auto& t : k_) out.push_back(&t);
    for (auto& t : v_) out.push_back(&t);
    return out;
  }

 private:
  const KvLayoutType& layout_;
  const bool linear_;  // K/V linear in x: projected through dense_
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
