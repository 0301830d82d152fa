// Rotary position embedding (see rope.h).
#include "model/rope.h"

namespace lrkv {

Rope::Rope(const ModelConfig& config) : config_(config), half_(config.rope_dim / 2) {
  // Angles in float64 so that long positions keep their precision.
  inv_freq_ = at::pow(config.rope_theta, -at::arange(0, half_, at::kDouble) * 2.0 /
                                             static_cast<double>(config.rope_dim));
}

bool Rope::PlaneRotates(int64_t plane) const {
  return config_.kv.rope_mode != RopeMode::kPartial || plane < config_.kv.rope_planes_kept;
}

std::pair<int64_t, int64_t> Rope::PlaneCoordinates(int64_t plane) const {
  if (config_.rope_layout == RopeLayout::kAdjacent) return {2 * plane, 2 * plane + 1};
  return {plane, plane + half_};
}

std::pair<at::Tensor, at::Tensor> Rope::Angles(const at::Tensor& positions) const {
  auto angles = positions.to(at::kDouble).unsqueeze(-1) * inv_freq_.to(positions.device());
  auto cos = angles.cos(), sin = angles.sin();
  if (config_.kv.rope_mode == RopeMode::kPartial) {
    const int64_t kept = config_.kv.rope_planes_kept;
    cos.narrow(-1, kept, half_ - kept).fill_(1.0);
    sin.narrow(-1, kept, half_ - kept).fill_(0.0);
  }
  return {cos, sin};
}

at::Tensor Rope::Rotate(const at::Tensor& x, const at::Tensor& positions) const {
  const int64_t r = config_.rope_dim;
  if (r == 0) return x;
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

at::Tensor Rope::RotatePairs(const at::Tensor& z, const at::Tensor& positions,
                             const at::Tensor& planes) const {
  const int64_t r = z.size(-1), pairs = r / 2;
  if (pairs == 0) return z;
  auto [cos_d, sin_d] = Angles(positions);  // [T, half]
  // Gather each head's plane frequencies: [T, n, pairs].
  const auto index = planes.reshape({-1});
  const int64_t n = planes.size(0), t = positions.size(0);
  const auto cos = cos_d.index_select(1, index).view({1, t, n, pairs}).to(z.scalar_type());
  const auto sin = sin_d.index_select(1, index).view({1, t, n, pairs}).to(z.scalar_type());
  auto p = z.narrow(-1, 0, 2 * pairs).unflatten(-1, {pairs, 2});
  auto z0 = p.select(-1, 0), z1 = p.select(-1, 1);
  auto out = at::stack({z0 * cos - z1 * sin, z0 * sin + z1 * cos}, -1).flatten(-2);
  if (2 * pairs == r) return out;
  return at::cat({out, z.narrow(-1, 2 * pairs, 1)}, -1);
}

}  // namespace lrkv
