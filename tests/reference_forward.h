// An independent float64 forward pass of a Llama-family decoder, written with plain
// loops from the Hugging Face definitions (RMSNorm, QK-norm, rotate_half RoPE with
// every rope_scaling type of transformers' modeling_rope_utils, GQA causal attention,
// SwiGLU): the reference the runtime's logits are judged against. It shares no code
// with model/ beyond reading the same weight values.
#ifndef LRKV_TESTS_REFERENCE_FORWARD_H_
#define LRKV_TESTS_REFERENCE_FORWARD_H_

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace lrkv::testing {

using Matrix = std::vector<double>;  // row-major
using Weights = std::map<std::string, Matrix>;

struct RefConfig {
  int hidden = 0, inter = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  int rope_dim = 0, max_pos = 0;
  int window = 0;  // sliding window (0: none)
  double eps = 1e-6, theta = 10000;
  bool qk_norm = false, bias = false, tied = false;
  // OLMo-2: QK-norm over the whole q / k projection, and post-norm blocks
  // (x + norm(attn(x)), x + norm(mlp(x)); no input_layernorm).
  bool olmo2 = false;
  nlohmann::json rope_scaling;  // null for plain RoPE
  std::vector<int> no_rope_layers;  // SmolLM3: 1 = RoPE, 0 = NoPE (empty: all RoPE)
  bool Rotates(int layer) const { return no_rope_layers.empty() || no_rope_layers[layer] != 0; }
};

// HF _compute_*_parameters: inverse frequencies and the attention factor.
inline std::vector<double> RefInvFreq(const RefConfig& c, int seq_len, double* attention) {
  const int dim = c.rope_dim, half = dim / 2;
  double base = c.theta;
  *attention = 1.0;
  const auto& s = c.rope_scaling;
  const std::string type = s.is_null()              ? "default"
                           : s.contains("rope_type") ? s["rope_type"].get<std::string>()
                                                     : s.value("type", "default");
  const double factor = s.is_null() ? 1.0 : s.value("factor", 1.0);
  if (type == "dynamic") {
    const double len = std::max<double>(seq_len, c.max_pos);
    base = base * std::pow(factor * len / c.max_pos - (factor - 1), double(dim) / (dim - 2));
  }
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = 1.0 / std::pow(base, 2.0 * i / dim);
  if (type == "linear") {
    for (double& f : inv) f /= factor;
  } else if (type == "llama3") {
    const double old = s["original_max_position_embeddings"], lo = s["low_freq_factor"],
                 hi = s["high_freq_factor"];
    for (double& f : inv) {
      const double wavelen = 2 * M_PI / f;
      if (wavelen < old / hi) continue;
      if (wavelen > old / lo) {
        f /= factor;
        continue;
      }
      const double smooth = (old / wavelen - lo) / (hi - lo);
      f = (1 - smooth) * f / factor + smooth * f;
    }
  } else if (type == "yarn") {
    double orig = c.max_pos, fac = factor;
    if (s.contains("original_max_position_embeddings")) {
      orig = s["original_max_position_embeddings"];
      fac = c.max_pos / orig;
    }
    auto corr = [&](double rot) {
      return dim * std::log(orig / (rot * 2 * M_PI)) / (2 * std::log(c.theta));
    };
    double low = std::max(std::floor(corr(s.value("beta_fast", 32.0))), 0.0);
    double high = std::min(std::ceil(corr(s.value("beta_slow", 1.0))), dim - 1.0);
    if (low == high) high += 0.001;
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extra = 1 - ramp;
      inv[i] = inv[i] / fac * (1 - extra) + inv[i] * extra;
    }
    *attention = s.contains("attention_factor") ? s["attention_factor"].get<double>()
                 : fac <= 1                     ? 1.0
                                                : 0.1 * std::log(fac) + 1.0;
  }
  return inv;
}

// y[n] = W[n, k] x[k] (+ b)
inline std::vector<double> MatVec(const Matrix& w, const std::vector<double>& x, int n,
                                  const Matrix* b = nullptr) {
  const int k = static_cast<int>(x.size());
  std::vector<double> y(n, 0.0);
  for (int i = 0; i < n; ++i) {
    double acc = b ? (*b)[i] : 0.0;
    for (int j = 0; j < k; ++j) acc += w[static_cast<size_t>(i) * k + j] * x[j];
    y[i] = acc;
  }
  return y;
}

inline std::vector<double> RmsNorm(const std::vector<double>& x, const Matrix& g, double eps,
                                   int offset = 0, int n = -1) {
  if (n < 0) n = static_cast<int>(x.size());
  std::vector<double> y(x.begin() + offset, x.begin() + offset + n);
  double ms = 0;
  for (double v : y) ms += v * v;
  const double r = 1.0 / std::sqrt(ms / n + eps);
  for (int i = 0; i < n; ++i) y[i] = y[i] * r * g[i];
  return y;
}

// Logits [T][vocab] for `tokens` at positions 0..T-1.
inline std::vector<std::vector<double>> RefForward(const RefConfig& c, const Weights& w,
                                                   const std::vector<int>& tokens) {
  const int T = static_cast<int>(tokens.size()), d = c.hidden, dh = c.head_dim;
  const int H = c.heads, Hk = c.kv_heads, half = c.rope_dim / 2;
  double att = 1.0;
  // Dynamic NTK scales by the sequence length; position p is taken with the length
  // p + 1, as token-by-token decoding in transformers does.
  std::vector<std::vector<double>> inv_at(T);
  for (int t = 0; t < T; ++t) inv_at[t] = RefInvFreq(c, t + 1, &att);
  std::vector<std::vector<double>> x(T, std::vector<double>(d));
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < d; ++i) x[t][i] = w.at("model.embed_tokens.weight")[tokens[t] * d + i];
  }
  auto rope = [&](std::vector<double>& v, int head, int pos) {
    const std::vector<double>& inv = inv_at[pos];
    for (int i = 0; i < half; ++i) {
      const double a = pos * inv[i], cs = std::cos(a) * att, sn = std::sin(a) * att;
      double& x0 = v[head * dh + i];
      double& x1 = v[head * dh + i + half];
      const double y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
      x0 = y0;
      x1 = y1;
    }
  };
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto W = [&](const std::string& n) -> const Matrix& { return w.at(p + n); };
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const auto xn = c.olmo2 ? x[t] : RmsNorm(x[t], W("input_layernorm.weight"), c.eps);
      q[t] = MatVec(W("self_attn.q_proj.weight"), xn, H * dh,
                    c.bias ? &W("self_attn.q_proj.bias") : nullptr);
      k[t] = MatVec(W("self_attn.k_proj.weight"), xn, Hk * dh,
                    c.bias ? &W("self_attn.k_proj.bias") : nullptr);
      v[t] = MatVec(W("self_attn.v_proj.weight"), xn, Hk * dh,
                    c.bias ? &W("self_attn.v_proj.bias") : nullptr);
      if (c.olmo2) {
        q[t] = RmsNorm(q[t], W("self_attn.q_norm.weight"), c.eps);
        k[t] = RmsNorm(k[t], W("self_attn.k_norm.weight"), c.eps);
      }
      for (int h = 0; h < H; ++h) {
        if (c.qk_norm && !c.olmo2) {
          const auto n = RmsNorm(q[t], W("self_attn.q_norm.weight"), c.eps, h * dh, dh);
          std::copy(n.begin(), n.end(), q[t].begin() + h * dh);
        }
        if (c.Rotates(l)) rope(q[t], h, t);
      }
      for (int h = 0; h < Hk; ++h) {
        if (c.qk_norm && !c.olmo2) {
          const auto n = RmsNorm(k[t], W("self_attn.k_norm.weight"), c.eps, h * dh, dh);
          std::copy(n.begin(), n.end(), k[t].begin() + h * dh);
        }
        if (c.Rotates(l)) rope(k[t], h, t);
      }
    }
    for (int t = 0; t < T; ++t) {
      std::vector<double> out(H * dh, 0.0);
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / Hk);
        std::vector<double> s(t + 1);
        double mx = -1e300;
        const int first = c.window > 0 ? std::max(0, t - c.window + 1) : 0;
        for (int u = 0; u < first; ++u) s[u] = -1e300;
        for (int u = first; u <= t; ++u) {
          double dot = 0;
          for (int i = 0; i < dh; ++i) dot += q[t][h * dh + i] * k[u][g * dh + i];
          s[u] = dot / std::sqrt(double(dh));
          mx = std::max(mx, s[u]);
        }
        double z = 0;
        for (double& e : s) z += (e = e < -1e299 ? 0.0 : std::exp(e - mx));
        for (int u = 0; u <= t; ++u) {
          for (int i = 0; i < dh; ++i) out[h * dh + i] += s[u] / z * v[u][g * dh + i];
        }
      }
      auto o = MatVec(W("self_attn.o_proj.weight"), out, d);
      if (c.olmo2) o = RmsNorm(o, W("post_attention_layernorm.weight"), c.eps);
      for (int i = 0; i < d; ++i) x[t][i] += o[i];
      const auto xn = c.olmo2 ? x[t] : RmsNorm(x[t], W("post_attention_layernorm.weight"), c.eps);
      auto gate = MatVec(W("mlp.gate_proj.weight"), xn, c.inter);
      const auto up = MatVec(W("mlp.up_proj.weight"), xn, c.inter);
      for (int i = 0; i < c.inter; ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      auto down = MatVec(W("mlp.down_proj.weight"), gate, d);
      if (c.olmo2) down = RmsNorm(down, W("post_feedforward_layernorm.weight"), c.eps);
      for (int i = 0; i < d; ++i) x[t][i] += down[i];
    }
  }
  std::vector<std::vector<double>> logits(T);
  const Matrix& head = w.count("lm_head.weight") ? w.at("lm_head.weight")
                                                 : w.at("model.embed_tokens.weight");
  for (int t = 0; t < T; ++t) {
    logits[t] = MatVec(head, RmsNorm(x[t], w.at("model.norm.weight"), c.eps), c.vocab);
  }
  return logits;
}

}  // namespace lrkv::testing

#endif  // LRKV_TESTS_REFERENCE_FORWARD_H_
