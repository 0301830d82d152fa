// Rotary position embedding for a model config: both layouts, partial rotary dims,
// and the partial-RoPE mode of converted models (only the first planes rotate). Also
// rotates latent coordinate pairs with chosen plane frequencies (LRKV plane mode).
#ifndef LRKV_RUNTIME_ROPE_H_
#define LRKV_RUNTIME_ROPE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "formats/config.h"

namespace lrkv {

// The inverse frequencies [half] (float64) of the RoPE planes for `config`'s
// rope_theta, rope_dim and rope_scaling; `seq_len` matters only to dynamic scaling,
// where position p uses those of seq_len = p + 1 (see Rope::Angles).
at::Tensor RopeInverseFrequencies(const ModelConfig& config, int64_t seq_len);

class Rope {
 public:
  explicit Rope(const ModelConfig& config);
  // The rotary embedding of decoder layer `layer`: none (rope_dim 0, every pair of the
  // head position-free) where the config turns RoPE off for it (SmolLM3's NoPE layers).
  Rope(const ModelConfig& config, int64_t layer);

  // Rotates x [B, T, n, d_h] at positions [T] (shared by the batch) or [B, T].
  at::Tensor Rotate(const at::Tensor& x, const at::Tensor& positions) const;

  // Rotates coordinate pairs (2m, 2m+1) of z [B, T, n, r] at positions [T] or
  // [B, T]; pair m of head i turns with the frequency of plane `planes[i][m]`
  // ([n, r/2] int64), a position-free plane (index >= planes()) not at all. An
  // odd last coordinate is left alone.
  at::Tensor RotatePairs(const at::Tensor& z, const at::Tensor& positions,
                         const at::Tensor& planes) const;

  // Rotates coordinate pairs (2m, 2m+1) of x [B, T, n, 2k] at positions [T] or [B, T],
  // pair m with the frequency of plane m (m >= planes() not at all): the rotated key
  // and query parts of MLA with decoupled RoPE, in DeepSeek's interleaved pair order.
  at::Tensor RotateLeadingPlanes(const at::Tensor& x, const at::Tensor& positions) const;

  // The head coordinates (first, second) of plane `plane`: a rotation plane below
  // planes(), else one of the position-free coordinate pairs a partial rotary leaves
  // after the rotated dims (rope_dim + 2j, rope_dim + 2j + 1), j = plane - planes().
  std::pair<int64_t, int64_t> PlaneCoordinates(int64_t plane) const;
  // The rotation planes (rope_dim / 2).
  int64_t planes() const { return half_; }
  // Every coordinate pair of a head (head_dim / 2): the rotation planes, then the
  // position-free pairs, which turn with frequency 0 (LRKV plane mode may select them).
  int64_t head_planes() const { return config_.head_dim / 2; }
  // Whether plane `plane` rotates in this model (false beyond the partial-RoPE planes).
  bool PlaneRotates(int64_t plane) const;

 private:
  // cos and sin [T, half] (float64) of every plane at `positions`, times the
  // scaling's attention factor.
  std::pair<at::Tensor, at::Tensor> Angles(const at::Tensor& positions) const;
  // Whether x [B, T, n, d] at `positions` can take a float32 loop (Rotate's,
  // RotatePairs'): float32 on the CPU without a gradient, positions [T] or
  // [B, T], fixed frequencies.
  bool FloatLoopApplies(const at::Tensor& x, const at::Tensor& positions) const;
  // Rotate for float32 x [B, T, n, d_h] on the CPU and fixed frequencies, in
  // one loop.
  at::Tensor RotateFloat(const at::Tensor& x,
                         const at::Tensor& positions) const;
  // RotatePairs for float32 z [B, T, n, r] on the CPU, positions [T] or [B, T]
  // and fixed frequencies, in one loop.
  at::Tensor RotatePairsFloat(const at::Tensor& z, const at::Tensor& positions,
                              const at::Tensor& planes) const;

  ModelConfig config_;
  int64_t half_;
  at::Tensor inv_freq_;  // [half] float64, after scaling (dynamic: per position instead)
};

// One Rope per decoder layer of `config`.
std::vector<Rope> LayerRopes(const ModelConfig& config);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_ROPE_H_
