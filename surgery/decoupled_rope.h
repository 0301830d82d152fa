// MLA with decoupled RoPE (the DeepSeek layout) from a dense MHA/GQA layer: the
// kept RoPE planes of every KV head's key are mixed across heads per frequency
// (TransMLA's RoRoPE observation: an orthogonal mixing of the heads' plane-m
// components commutes with RoPE, which turns them all by the same angle), and
// the top principal direction of each plane becomes the one rotated key all
// heads share. Each query head's plane m, scaled by its KV head's weight in
// that direction, becomes its rotated query part. What the shared key does not
// carry, and every plane not kept, joins the RoPE-free key that the joint
// latent then compresses: an approximation of the source (it loses those
// components' rotation), exact where H_kv = 1 and every plane is kept.
#ifndef LRKV_SURGERY_DECOUPLED_ROPE_H_
#define LRKV_SURGERY_DECOUPLED_ROPE_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "formats/config.h"

namespace lrkv {

struct DecoupledRopeSplit {
  at::Tensor wk_nope,
      bk_nope;  // [Hkv*dh, d], [Hkv*dh]: the key less its rotated part
  at::Tensor k_rope,
      bk_rope;  // [2k, d], [2k]: the shared rotated key, pair m = plane m
  at::Tensor q_rope,
      bq_rope;  // [H*2k, d], [H*2k]: each query head's rotated part
  /// Of the kept planes' key energy (whitened under the activation metric), the
  /// share the shared rotated key carries (1 for H_kv = 1).
  double shared_rope_energy = 0;
  /// Of the whole key's energy, the share in the kept planes.
  double kept_plane_energy = 0;
};

// The split of layer `layer` of a dense model with `config` (wq [H*dh, d], wk
// [Hkv*dh, d], biases [..] or undefined) keeping RoPE planes 0..kept-1 (the
// highest frequencies: DeepSeek's rotary runs one frequency progression for all
// layers, which a per-layer choice could not export). `whitening`: L or
// undefined (weight metric). A NoPE layer keeps no rotated part (its shared key
// is zero).
DecoupledRopeSplit SplitDecoupledRope(
    const ModelConfig& config, int64_t layer, const at::Tensor& wq,
    const at::Tensor& bq, const at::Tensor& wk, const at::Tensor& bk,
    const at::Tensor& whitening, int64_t kept);

}  // namespace lrkv

#endif  // LRKV_SURGERY_DECOUPLED_ROPE_H_
