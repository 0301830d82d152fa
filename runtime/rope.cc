// Rotary position embedding (see rope.h).
#include "runtime/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace lrkv {
namespace {

// Dynamic NTK's rope_theta for sequences of `len` tokens (float64, any shape):
// unscaled within the trained context.
at::Tensor DynamicNtkBase(const ModelConfig& c, const at::Tensor& len) {
  const RopeScaling& s = c.rope_scaling;
  const double trained = static_cast<double>(s.original_max_position_embeddings > 0
                                                 ? s.original_max_position_embeddings
                                                 : c.max_position_embeddings);
  const double dim = static_cast<double>(c.rope_dim);
  return c.rope_theta *
         (s.factor * len.clamp_min(trained) / trained - (s.factor - 1.0)).pow(dim / (dim - 2.0));
}

// 2i / rope_dim for the rotation planes i: base^-exponent is a plane's frequency.
at::Tensor PlaneExponents(const ModelConfig& c, const at::TensorOptions& options) {
  return at::arange(0, c.rope_dim / 2, options) * 2.0 / static_cast<double>(c.rope_dim);
}

}  // namespace

at::Tensor RopeInverseFrequencies(const ModelConfig& c, int64_t seq_len) {
  const RopeScaling& s = c.rope_scaling;
  const at::Tensor base =
      s.type == RopeScalingType::kDynamic
          ? DynamicNtkBase(c, at::scalar_tensor(static_cast<double>(seq_len), at::kDouble))
          : at::scalar_tensor(c.rope_theta, at::kDouble);
  at::Tensor inv_freq = base.pow(-PlaneExponents(c, at::kDouble));
  const int64_t half = c.rope_dim / 2;
  const double dim = static_cast<double>(c.rope_dim);
  switch (s.type) {
    case RopeScalingType::kNone:
    case RopeScalingType::kDynamic:
      break;
    case RopeScalingType::kLinear:
      inv_freq = inv_freq / s.factor;
      break;
    case RopeScalingType::kLlama3: {
      auto f = inv_freq.accessor<double, 1>();
      for (int64_t i = 0; i < half; ++i) f[i] = Llama3InverseFrequency(s, f[i]);
      break;
    }
    case RopeScalingType::kYarn: {
      const double orig = static_cast<double>(s.original_max_position_embeddings);
      auto correction_dim = [&](double rotations) {
        return dim * std::log(orig / (rotations * 2.0 * M_PI)) / (2.0 * std::log(c.rope_theta));
      };
      double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
      if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, dim - 1.0);
      if (low == high) high += 0.001;
      const auto ramp =
          ((at::arange(0, half, at::kDouble) - low) / (high - low)).clamp(0.0, 1.0);
      const auto extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
      inv_freq = inv_freq / s.factor * (1.0 - extrapolation) + inv_freq * extrapolation;
      break;
    }
  }
  return inv_freq;
}

Rope::Rope(const ModelConfig& config) : config_(config), half_(config.rope_dim / 2) {
  // Angles in float64 so that long positions keep their precision.
  inv_freq_ = RopeInverseFrequencies(config, 0);
}

namespace {

ModelConfig ForLayer(ModelConfig c, int64_t layer) {
  if (!c.UsesRope(layer)) c.rope_dim = 0;
  return c;
}

}  // namespace

Rope::Rope(const ModelConfig& config, int64_t layer) : Rope(ForLayer(config, layer)) {}

std::vector<Rope> LayerRopes(const ModelConfig& config) {
  std::vector<Rope> out;
  for (int64_t i = 0; i < config.num_layers; ++i) out.emplace_back(config, i);
  return out;
}

bool Rope::PlaneRotates(int64_t plane) const {
  return !RopeModeTraitsOf(config_.kv.rope_mode).keeps_some_planes ||
         plane < config_.kv.rope_planes_kept;
}

std::pair<int64_t, int64_t> Rope::PlaneCoordinates(int64_t plane) const {
  if (plane >= half_) {
    const int64_t first = config_.rope_dim + 2 * (plane - half_);
    return {first, first + 1};
  }
  if (config_.rope_layout == RopeLayout::kAdjacent) return {2 * plane, 2 * plane + 1};
  return {plane, plane + half_};
}

std::pair<at::Tensor, at::Tensor> Rope::Angles(const at::Tensor& positions) const {
  at::Tensor cos, sin;
  const RopeScaling& s = config_.rope_scaling;
  if (s.type == RopeScalingType::kDynamic) {
    // Dynamic NTK: position p turns with the frequencies of a sequence of p + 1
    // tokens (unscaled within the trained context). transformers scales per forward
    // call by the longest position in it, so its result past the trained context
    // depends on how the sequence is cut into calls; per position is what its
    // token-by-token decoding computes, and the one rule under which a cached key
    // keeps its rotation, so every engine and cache agrees.
    const auto pos = positions.to(at::kDouble);
    const auto base = DynamicNtkBase(config_, pos + 1.0);
    const auto angles =
        pos.unsqueeze(-1) *
        base.unsqueeze(-1).pow(-PlaneExponents(config_, pos.options()));
    cos = angles.cos();
    sin = angles.sin();
  } else if (positions.device().is_cpu()) {
    // Fixed frequencies on the CPU: one loop. A decode step asks for one
    // position twice per layer and sequence, where the ATen operations cost far
    // more than the few cosines.
    const at::Tensor pos = positions.to(at::kLong).contiguous();
    const at::Tensor inv_freq = inv_freq_.contiguous();
    std::vector<int64_t> shape = pos.sizes().vec();
    shape.push_back(half_);
    cos = at::empty(shape, at::kDouble);
    sin = at::empty(shape, at::kDouble);
    const int64_t* p = pos.data_ptr<int64_t>();
    const double* inv = inv_freq.data_ptr<double>();
    double *c = cos.data_ptr<double>(), *sn = sin.data_ptr<double>();
    for (int64_t t = 0; t < pos.numel(); ++t) {
      for (int64_t i = 0; i < half_; ++i) {
        const double a = static_cast<double>(p[t]) * inv[i];
        c[t * half_ + i] = std::cos(a);
        sn[t * half_ + i] = std::sin(a);
      }
    }
  } else {
    const auto angles = positions.to(at::kDouble).unsqueeze(-1) *
                        inv_freq_.to(positions.device());
    cos = angles.cos();
    sin = angles.sin();
  }
  if (RopeModeTraitsOf(config_.kv.rope_mode).keeps_some_planes) {
    const int64_t kept = std::min(config_.kv.rope_planes_kept, half_);
    cos.narrow(-1, kept, half_ - kept).fill_(1.0);
    sin.narrow(-1, kept, half_ - kept).fill_(0.0);
  }
  if (const double af = config_.rope_scaling.attention_factor; af != 1.0) {
    cos = cos * af;
    sin = sin * af;
  }
  return {cos, sin};
}

namespace {

// One plane's rotation in float32, for the loops of RotateFloat and
// RotatePairsFloat: cos and sin rounded to fp32, then the same products, sums
// and roundings as the ATen expressions of Rotate and RotatePairs.
inline void RotatePlane(float x0, float x1, double cos, double sin, float* o0,
                        float* o1) {
  const float c = static_cast<float>(cos), sn = static_cast<float>(sin);
  const float a0 = x0 * c, b0 = x1 * sn;
  const float a1 = x0 * sn, b1 = x1 * c;
  *o0 = a0 - b0;
  *o1 = a1 + b1;
}

// A new x [B, T, n, d] (float32) whose head rows fn(in, out, cos, sin, head)
// writes from x's, with the float64 cos and sin rows [half] of the row's
// position: Angles [T, half] shared by the batch, or [B, T, half] per
// sequence.
template <typename Fn>
at::Tensor MapHeadRows(const at::Tensor& x, const at::Tensor& cos_d,
                       const at::Tensor& sin_d, Fn&& fn) {
  const at::Tensor xs = x.contiguous();
  const at::Tensor cos = cos_d.contiguous(), sin = sin_d.contiguous();
  const int64_t B = xs.size(0), T = xs.size(1), n = xs.size(2), d = xs.size(3),
                half = cos.size(-1);
  const bool per_sequence = cos.dim() == 3;
  at::Tensor out = at::empty_like(xs);
  const float* in = xs.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = (per_sequence ? b : 0) * T + t;
      const double* cd = cos.data_ptr<double>() + row * half;
      const double* sd = sin.data_ptr<double>() + row * half;
      for (int64_t h = 0; h < n; ++h) {
        const int64_t offset = ((b * T + t) * n + h) * d;
        fn(in + offset, o + offset, cd, sd, h);
      }
    }
  }
  return out;
}

}  // namespace

bool Rope::FloatLoopApplies(const at::Tensor& x,
                            const at::Tensor& positions) const {
  return !x.requires_grad() && x.scalar_type() == at::kFloat &&
         x.device().is_cpu() && x.dim() == 4 && positions.device().is_cpu() &&
         positions.dim() >= 1 && positions.dim() <= 2 &&
         positions.size(-1) == x.size(1) &&
         (positions.dim() == 1 || positions.size(0) == x.size(0)) &&
         config_.rope_scaling.type != RopeScalingType::kDynamic;
}

at::Tensor Rope::RotateFloat(const at::Tensor& x,
                             const at::Tensor& positions) const {
  const int64_t r = config_.rope_dim, d = x.size(3);
  const bool adjacent = config_.rope_layout == RopeLayout::kAdjacent;
  const auto [cos, sin] = Angles(positions);  // [T, half] or [B, T, half]
  return MapHeadRows(x, cos, sin,
                     [&](const float* xi, float* oi, const double* cd,
                         const double* sd, int64_t) {
                       for (int64_t i = 0; i < half_; ++i) {
                         // The first and second coordinate of plane i.
                         const int64_t j0 = adjacent ? 2 * i : i,
                                       j1 = adjacent ? 2 * i + 1 : i + half_;
                         RotatePlane(xi[j0], xi[j1], cd[i], sd[i], &oi[j0],
                                     &oi[j1]);
                       }
                       for (int64_t j = r; j < d; ++j) oi[j] = xi[j];
                     });
}

at::Tensor Rope::Rotate(const at::Tensor& x, const at::Tensor& positions) const {
  const int64_t r = config_.rope_dim;
  if (r == 0) return x;
  // Float32 on the CPU with fixed frequencies and no gradient to carry (every
  // decode step's query and key): one loop, 3 µs a call for a Qwen3 query here
  // against 15 µs for the ATen expression below (its cos and sin from the same
  // loop in Angles; 32 µs when they too were ATen operations), which runs twice
  // per layer and sequence in a decode step. Healing trains through the
  // expression.
  if (FloatLoopApplies(x, positions)) return RotateFloat(x, positions);
  auto [cos_d, sin_d] = Angles(positions);  // [T, half] or [B, T, half]
  const int64_t b = positions.dim() == 2 ? positions.size(0) : 1;
  const auto cos = cos_d.to(x.scalar_type()).view({b, -1, 1, half_});
  const auto sin = sin_d.to(x.scalar_type()).view({b, -1, 1, half_});
  auto rot = x.narrow(-1, 0, r);
  at::Tensor out;
  if (config_.rope_layout == RopeLayout::kAdjacent) {
    auto pairs = rot.unflatten(-1, {half_, 2});
    auto x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
    out = at::stack({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).flatten(-2);
  } else {
    auto x0 = rot.narrow(-1, 0, half_), x1 = rot.narrow(-1, half_, half_);
    out = at::cat({x0 * cos - x1 * sin, x1 * cos + x0 * sin}, -1);
  }
  if (r == x.size(-1)) return out;
  return at::cat({out, x.narrow(-1, r, x.size(-1) - r)}, -1);
}

at::Tensor Rope::RotatePairsFloat(const at::Tensor& z,
                                  const at::Tensor& positions,
                                  const at::Tensor& planes) const {
  const at::Tensor plane_of = planes.to(at::kLong).contiguous();
  const int64_t* plane = plane_of.data_ptr<int64_t>();
  const int64_t r = z.size(3), pairs = r / 2;
  const auto [cos, sin] = Angles(positions);  // [T, half]
  return MapHeadRows(
      z, cos, sin,
      [&](const float* zi, float* oi, const double* cd, const double* sd,
          int64_t h) {
        for (int64_t m = 0; m < pairs; ++m) {
          // A position-free plane turns by cos 1 and sin 0.
          const int64_t p = plane[h * pairs + m];
          RotatePlane(zi[2 * m], zi[2 * m + 1], p < half_ ? cd[p] : 1.0,
                      p < half_ ? sd[p] : 0.0, &oi[2 * m], &oi[2 * m + 1]);
        }
        if (2 * pairs < r) oi[r - 1] = zi[r - 1];
      });
}

at::Tensor Rope::RotatePairs(const at::Tensor& z, const at::Tensor& positions,
                             const at::Tensor& planes) const {
  const int64_t r = z.size(-1), pairs = r / 2;
  if (pairs == 0) return z;
  // Float32 on the CPU with fixed frequencies and no gradient (every decode
  // step's latents): one loop, as Rotate takes one. The ATen expression below
  // was 4 % of an 8-sequence plane step at the Qwen3-0.6B shape.
  if (FloatLoopApplies(z, positions) && planes.device().is_cpu() &&
      planes.dim() == 2 && planes.size(0) == z.size(2) &&
      planes.size(1) == pairs) {
    return RotatePairsFloat(z, positions, planes);
  }
  auto [cos_d, sin_d] = Angles(positions);  // [T, half] or [B, T, half]
  if (const int64_t free = head_planes() - half_; free > 0) {
    // Position-free planes: the identity, without the attention factor (the
    // pass-through dims of a partial rotary are not scaled).
    std::vector<int64_t> shape = cos_d.sizes().vec();
    shape.back() = free;
    cos_d = at::cat({cos_d, at::ones(shape, cos_d.options())}, -1);
    sin_d = at::cat({sin_d, at::zeros(shape, sin_d.options())}, -1);
  }
  // Gather each head's plane frequencies: [1 or B, T, n, pairs].
  const auto index = planes.reshape({-1});
  const int64_t n = planes.size(0), t = positions.size(-1),
                lead = positions.dim() == 2 ? positions.size(0) : 1;
  const auto cos = cos_d.index_select(-1, index)
                       .view({lead, t, n, pairs})
                       .to(z.scalar_type());
  const auto sin = sin_d.index_select(-1, index)
                       .view({lead, t, n, pairs})
                       .to(z.scalar_type());
  auto p = z.narrow(-1, 0, 2 * pairs).unflatten(-1, {pairs, 2});
  auto z0 = p.select(-1, 0), z1 = p.select(-1, 1);
  auto out = at::stack({z0 * cos - z1 * sin, z0 * sin + z1 * cos}, -1).flatten(-2);
  if (2 * pairs == r) return out;
  return at::cat({out, z.narrow(-1, 2 * pairs, 1)}, -1);
}

at::Tensor Rope::RotateLeadingPlanes(const at::Tensor& x, const at::Tensor& positions) const {
  const int64_t k = x.size(-1) / 2;
  if (k == 0) return x;
  auto [cos_d, sin_d] = Angles(positions);  // [T, half] or [B, T, half]
  const int64_t rotated = std::min(k, half_);
  auto pad = [&](const at::Tensor& a, double fill) {
    auto part = a.narrow(-1, 0, rotated);
    if (rotated == k) return part;
    auto sizes = part.sizes().vec();
    sizes.back() = k - rotated;
    return at::cat({part, at::full(sizes, fill, part.options())}, -1);
  };
  const int64_t b = positions.dim() == 2 ? positions.size(0) : 1;
  const auto cos = pad(cos_d, 1.0).to(x.scalar_type()).view({b, -1, 1, k});
  const auto sin = pad(sin_d, 0.0).to(x.scalar_type()).view({b, -1, 1, k});
  auto p = x.unflatten(-1, {k, 2});
  auto x0 = p.select(-1, 0), x1 = p.select(-1, 1);
  return at::stack({x0 * cos - x1 * sin, x0 * sin + x1 * cos}, -1).flatten(-2);
}

}  // namespace lrkv
