// The Llama-family decoder runtime on LibTorch (see transformer.h).
#include "runtime/transformer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/kv_layout.h"
#include "runtime/layer_checkpoint.h"
#include "runtime/layers.h"

namespace lrkv {

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Create(ModelConfig config,
                                                                 LlamaWeights weights) {
  if (auto s = config.Validate(); !s.ok()) return s;
  if (static_cast<int64_t>(weights.layers.size()) != config.num_layers ||
      !weights.embed.defined() || !weights.lm_head.defined() ||
      weights.embed.size(0) != config.vocab_size ||
      weights.embed.size(1) != config.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights do not match the config (", weights.layers.size(), " layers for ",
        config.num_layers, ")"));
  }
  for (size_t i = 0; i < weights.layers.size(); ++i) {
    const LayerWeights& l = weights.layers[i];
    const int64_t layer = static_cast<int64_t>(i);
    const bool kv_ok = KvLayoutTypeOf(config.kv.layout).WeightsMatch(config, layer, l);
    if (!kv_ok || l.wq.size(0) != config.num_heads * config.head_dim ||
        config.qk_norm != l.q_norm.defined() || config.qkv_bias != l.bq.defined()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention weights do not match the config (", KvLayoutName(config.kv.layout),
          " K/V layout)"));
    }
  }
  return std::unique_ptr<Transformer>(
      new Transformer(std::move(config), std::move(weights)));
}

at::Tensor Transformer::RmsNorm(const at::Tensor& x, const at::Tensor& gamma) const {
  return lrkv::RmsNorm(x, gamma, config_.rms_norm_eps);
}

at::Tensor Transformer::ApplyRope(int64_t layer, const at::Tensor& x,
                                  const at::Tensor& positions) const {
  return ropes_[layer].Rotate(x, positions);
}

void Transformer::ProjectQkv(int64_t layer, const LayerWeights& l, const at::Tensor& x,
                             const at::Tensor& positions, at::Tensor* q, at::Tensor* k,
                             at::Tensor* v) const {
  const int64_t b = x.size(0), t = x.size(1), dh = config_.head_dim;
  const int64_t hkv = config_.num_kv_heads;
  const auto& linear = Linear;
  auto qp = linear(x, l.wq, l.bq).view({b, t, config_.num_heads, dh});
  at::Tensor kp, vp;
  KvLayoutTypeOf(config_.kv.layout).ProjectKv(config_, layer, l, x, &kp, &vp);
  kp = kp.reshape({b, t, hkv, dh});
  *v = vp.reshape({b, t, hkv, dh});
  if (config_.kv.DecoupledRope()) {
    // The DeepSeek layout: RoPE-free query and key parts, and each query head's rotated
    // part against the one rotated key all heads share (Config::Validate rules out
    // QK-norm here).
    const int64_t w = config_.kv.RopeWidth();
    auto k_rope = RotateDecoupled(layer, linear(x, l.k_rope, l.bk_rope).view({b, t, 1, w}),
                                  positions);
    auto q_rope = RotateDecoupled(
        layer, linear(x, l.q_rope, l.bq_rope).view({b, t, config_.num_heads, w}), positions);
    *q = at::cat({qp, q_rope}, -1);
    *k = at::cat({kp, k_rope.expand({b, t, hkv, w})}, -1);
    return;
  }
  if (config_.qk_norm) {
    qp = QkNorm(config_, qp, l.q_norm);
    kp = QkNorm(config_, kp, l.k_norm);
  }
  *q = ApplyRope(layer, qp, positions);
  *k = ApplyRope(layer, kp, positions);
}

at::Tensor Transformer::RotateDecoupled(int64_t layer, const at::Tensor& x,
                                        const at::Tensor& positions) const {
  return ropes_[layer].RotateLeadingPlanes(x, positions);
}

at::Tensor Transformer::CausalMask(int64_t start, int64_t t, int64_t s,
                                   at::Device device) const {
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  auto qpos = at::arange(start, start + t, opts).unsqueeze(1);
  auto kpos = at::arange(0, s, opts).unsqueeze(0);
  if (config_.sliding_window > 0) {
    return (kpos > qpos) | (qpos - kpos >= config_.sliding_window);
  }
  return kpos > qpos;
}

at::Tensor Transformer::Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& hidden) const {
  // Keys may be wider than values (decoupled RoPE: d_h + w); the scale stays
  // the source's 1/sqrt(d_h).
  const int64_t b = q.size(0), t = q.size(1), h = config_.num_heads, hkv = config_.num_kv_heads,
                g = h / hkv, dh = config_.head_dim, s = k.size(2), dq = q.size(3), dv = v.size(3);
  // Query head j*g + i uses KV head j (the grouping of HF's repeat_kv).
  auto kg = k.unsqueeze(2);  // [B, Hkv, 1, S, dh]
  auto vg = v.unsqueeze(2);
  const auto mask = hidden.dim() == 3 ? hidden.view({b, 1, 1, t, s}) : hidden;
  // Queries in blocks whose scores stay under kScoreBlockBytes: a 2,048-token
  // window's [H, T, S] scores at once were hundreds of MB per layer (RSS, and
  // fresh pages faulted in at every layer: a 260K-parameter model's calibration
  // on one 20 kB line took 51 s); rows are independent, so blocks change
  // nothing but the peak.
  constexpr int64_t kScoreBlockBytes = 8 << 20;
  const int64_t rows =
      std::clamp<int64_t>(kScoreBlockBytes / std::max<int64_t>(1, b * h * s * 4), 1, t);
  std::vector<at::Tensor> blocks;
  for (int64_t r0 = 0; r0 < t; r0 += rows) {
    const int64_t n = std::min(rows, t - r0);
    auto block_mask = mask.narrow(-2, r0, n);
    // Keys past the last one any row of the block may see (a causal mask's
    // future) are left out rather than scored and masked.
    int64_t keys = s;
    if (rows < t) {
      const auto seen = (~block_mask).flatten(0, -2).any(0).nonzero();
      keys = seen.numel() > 0 ? seen.max().item<int64_t>() + 1 : s;
    }
    auto qg = q.narrow(1, r0, n).permute({0, 2, 1, 3}).reshape({b, hkv, g, n, dq});
    auto scores = at::matmul(qg, kg.narrow(3, 0, keys).transpose(-1, -2)) /
                  std::sqrt(static_cast<double>(dh));
    scores =
        scores.masked_fill(block_mask.narrow(-1, 0, keys), -std::numeric_limits<float>::infinity());
    auto probs = at::softmax(scores, -1);
    auto out = at::matmul(probs, vg.narrow(3, 0, keys));  // [B, Hkv, g, n, dv]
    blocks.push_back(out.reshape({b, h, n, dv}).permute({0, 2, 1, 3}).reshape({b, n, h * dv}));
  }
  return blocks.size() == 1 ? blocks[0] : at::cat(blocks, 1);
}

at::Tensor Transformer::FeedForward(const LayerWeights& l, const at::Tensor& x) const {
  return lrkv::FeedForward(l, x);
}

at::Tensor Transformer::Forward(const at::Tensor& tokens,
                                const AttentionInputObserver& observer) const {
  const int64_t t = tokens.size(1);
  return Run(tokens, at::arange(0, t, tokens.options().dtype(at::kLong)),
             CausalMask(0, t, t, tokens.device()), observer);
}

at::Tensor Transformer::ForwardPacked(const at::Tensor& tokens, const at::Tensor& positions,
                                      const at::Tensor& segments) const {
  const int64_t t = tokens.size(1);
  const auto other_segment = segments.unsqueeze(2) != segments.unsqueeze(1);  // [B, T, T]
  return Run(tokens, positions, CausalMask(0, t, t, tokens.device()).unsqueeze(0) | other_segment,
             nullptr);
}

at::Tensor Transformer::Run(const at::Tensor& tokens, const at::Tensor& positions,
                            const at::Tensor& hidden,
                            const AttentionInputObserver& observer) const {
  auto x = Embed(weights_.embed, tokens);
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    // By value: a checkpointed layer runs again in the backward pass, after this call.
    auto layer = [this, i, positions, hidden, observer](const at::Tensor& in) {
      const auto& l = weights_.layers[i];
      at::Tensor q, k, v;
      auto normed = AttentionInput(config_, l, in);
      if (observer) observer(static_cast<int64_t>(i), normed);
      ProjectQkv(static_cast<int64_t>(i), l, normed, positions, &q, &k, &v);
      auto attn = Attend(q, k.permute({0, 2, 1, 3}), v.permute({0, 2, 1, 3}), hidden);
      return AddFeedForward(config_, l, AddAttention(config_, l, in, attn));
    };
    x = checkpoint_layers_ && !observer ? CheckpointedLayer(layer, x) : layer(x);
  }
  return Linear(RmsNorm(x, weights_.final_norm), weights_.lm_head);
}

KVCache Transformer::NewCache(int64_t batch, int64_t capacity) const {
  KVCache cache;
  cache.capacity = capacity;
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    cache.k.push_back(
        at::zeros({batch, config_.num_kv_heads, capacity,
                   config_.head_dim + config_.kv.RopeWidth()},
                  weights_.embed.options().dtype(ComputeDtype(weights_.embed))));
    cache.v.push_back(
        at::zeros({batch, config_.num_kv_heads, capacity, config_.head_dim},
                  weights_.embed.options().dtype(ComputeDtype(weights_.embed))));
  }
  return cache;
}

at::Tensor Transformer::ForwardCached(KVCache& cache, const at::Tensor& tokens) const {
  const int64_t t = tokens.size(1), start = cache.length, end = start + t;
  if (end > cache.capacity) {
    const int64_t grown = std::max(end, 2 * cache.capacity);
    for (size_t i = 0; i < cache.k.size(); ++i) {
      auto pad = [&](const at::Tensor& old) {
        auto fresh = at::zeros({old.size(0), old.size(1), grown, old.size(3)}, old.options());
        fresh.narrow(2, 0, start).copy_(old.narrow(2, 0, start));
        return fresh;
      };
      cache.k[i] = pad(cache.k[i]);
      cache.v[i] = pad(cache.v[i]);
    }
    cache.capacity = grown;
  }
  auto positions = at::arange(start, end, tokens.options().dtype(at::kLong));
  auto x = Embed(weights_.embed, tokens);
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    const auto& l = weights_.layers[i];
    at::Tensor q, k, v;
    ProjectQkv(static_cast<int64_t>(i), l, AttentionInput(config_, l, x), positions, &q, &k,
               &v);
    cache.k[i].narrow(2, start, t).copy_(k.permute({0, 2, 1, 3}));
    cache.v[i].narrow(2, start, t).copy_(v.permute({0, 2, 1, 3}));
    auto attn = Attend(q, cache.k[i].narrow(2, 0, end), cache.v[i].narrow(2, 0, end),
                       CausalMask(start, t, end, tokens.device()));
    x = AddAttention(config_, l, x, attn);
    x = AddFeedForward(config_, l, x);
  }
  cache.length = end;
  return Linear(RmsNorm(x, weights_.final_norm), weights_.lm_head);
}

std::vector<int32_t> Transformer::GenerateGreedy(const std::vector<int32_t>& prompt,
                                                 int64_t max_new_tokens,
                                                 bool stop_at_eos) const {
  std::vector<int32_t> out;
  if (prompt.empty() || max_new_tokens <= 0) return out;
  at::NoGradGuard no_grad;
  KVCache cache = NewCache(1, static_cast<int64_t>(prompt.size()) + max_new_tokens);
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  const at::Device device = weights_.embed.device();
  auto logits = ForwardCached(cache, at::tensor(ids, at::kLong).unsqueeze(0).to(device));
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const auto next = static_cast<int32_t>(logits[0][-1].argmax().item<int64_t>());
    out.push_back(next);
    if (stop_at_eos && config_.IsEos(next)) break;
    if (i + 1 == max_new_tokens) break;
    logits = ForwardCached(cache, at::full({1, 1}, next, at::kLong).to(device));
  }
  return out;
}

}  // namespace lrkv
