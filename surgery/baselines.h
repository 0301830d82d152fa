// Baseline conversions to compare LRKV against (docs/design.md, "Surgery"):
// GQA/MQA by mean-pooling the K/V heads of each query group (Ainslie et al.
// 2023), and MLA by one joint latent from a rank-d_c SVD of [W_K | W_V]
// (whitened when calibrating).
#ifndef LRKV_SURGERY_BASELINES_H_
#define LRKV_SURGERY_BASELINES_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "formats/config.h"

namespace lrkv {

// Pools a per-KV-head tensor ([H_kv*d_h, d] weights or [H_kv*d_h] biases) of a model
// with `config` into `n_kv` heads: target head j is the mean, over the query heads of
// its group, of the source KV head each of them used.
at::Tensor PoolKvHeads(const ModelConfig& config, const at::Tensor& per_head,
                       int64_t n_kv);

struct MlaFactors {
  at::Tensor kv_down;  // [d_c, d]
  at::Tensor k_up;     // [H_kv*d_h, d_c]
  at::Tensor v_up;     // [H_kv*d_h, d_c]
  // ‖M([W_K|W_V] − down·up)‖ / ‖M [W_K|W_V]‖ and the same for K and V alone.
  double rel_error = 0, k_rel_error = 0, v_rel_error = 0;
};

// `wk`, `wv`: [H_kv*d_h, d]; `whitening`: L [d, d] or undefined (weight metric).
MlaFactors FactorizeMla(const at::Tensor& wk, const at::Tensor& wv,
                        const at::Tensor& whitening, int64_t latent);

// The MLA error ‖M([W_K|W_V] − down·up)‖² at every latent d_c = 0..2·H_kv·d_h (the
// energy of the singular values past d_c: exact, as FactorizeMla's fit is the SVD's).
std::vector<double> MlaErrorCurve(const at::Tensor& wk, const at::Tensor& wv,
                                  const at::Tensor& whitening);

// ‖M(a − b)‖ / ‖M a‖ for [out, d] weights, M = Lᵀ (or I when `whitening` is undefined).
double RelativeError(const at::Tensor& a, const at::Tensor& b, const at::Tensor& whitening);

}  // namespace lrkv

#endif  // LRKV_SURGERY_BASELINES_H_
