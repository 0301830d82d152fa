// The RoRoPE split of MLA with decoupled RoPE (see header).
#include "surgery/decoupled_rope.h"

#include "runtime/rope.h"
#include "surgery/complex_planes.h"

namespace lrkv {

DecoupledRopeSplit SplitDecoupledRope(
    const ModelConfig& config, int64_t layer, const at::Tensor& wq,
    const at::Tensor& bq, const at::Tensor& wk, const at::Tensor& bk,
    const at::Tensor& whitening, int64_t kept) {
  const int64_t h = config.num_heads, hkv = config.num_kv_heads,
                dh = config.head_dim, group = h / hkv, d = wk.size(1),
                w = 2 * kept;
  const auto f64 = at::kDouble;
  auto wk_nope = wk.to(f64).reshape({hkv, dh, d}).clone();
  const auto wq64 = wq.to(f64).reshape({h, dh, d});
  const bool biased = bk.defined();
  auto bk_nope = biased ? bk.to(f64).reshape({hkv, dh}).clone() : at::Tensor();
  const auto bq64 = biased ? bq.to(f64).reshape({h, dh}) : at::Tensor();
  auto k_rope = at::zeros({w, d}, f64), q_rope = at::zeros({h, w, d}, f64);
  auto bk_rope = at::zeros({w}, f64), bq_rope = at::zeros({h, w}, f64);
  const at::Tensor L = whitening.defined() ? whitening.to(f64) : at::Tensor();
  auto whiten = [&](const at::Tensor& rows) {
    return L.defined() ? at::matmul(rows, L) : rows;
  };
  const double total =
      whiten(wk_nope.reshape({-1, d})).pow(2).sum().item<double>();
  double kept_energy = 0, shared_energy = 0;
  const Rope rope(config, layer);
  for (int64_t m = 0; m < kept && m < rope.planes(); ++m) {
    const auto [a, b] = rope.PlaneCoordinates(m);
    // Plane m of KV head h as one complex row w_h = W_a + i·W_b: RoPE multiplies the
    // key's plane by e^{iθt}, so any complex factor per head commutes with it. The best
    // shared row s (in the metric) for w_h ≈ u_h·s is the top eigenvector u of the
    // heads' Hermitian Gram G = W̃ W̃ᴴ, with s = Σ_h conj(u_h) w_h.
    const auto ra = wk_nope.select(1, a), rb = wk_nope.select(1, b);  // [Hkv, d]
    double trace = 0;
    const PlaneDirection u = PlaneDirections(whiten(ra), whiten(rb), &trace).back();
    const auto &ur = u.re, &ui = u.im;
    kept_energy += trace;
    shared_energy += u.energy;
    const auto [s_re, s_im] = MixPlane(u, ra, rb);
    k_rope.select(0, 2 * m).copy_(s_re);
    k_rope.select(0, 2 * m + 1).copy_(s_im);
    // The residual w_h − u_h·s stays in the RoPE-free key.
    const auto [carried_a, carried_b] = SpreadPlane(u, s_re, s_im);
    wk_nope.select(1, a).copy_(ra - carried_a);
    wk_nope.select(1, b).copy_(rb - carried_b);
    // Query head j of KV head g = j / group: q·(u_g z) = (conj(u_g) q̂)·z, both turned
    // by RoPE alike.
    const auto gr = ur.repeat_interleave(group).unsqueeze(1),
               gi = ui.repeat_interleave(group).unsqueeze(1);  // [H, 1]
    const auto qa = wq64.select(1, a), qb = wq64.select(1, b);  // [H, d]
    q_rope.select(1, 2 * m).copy_(gr * qa + gi * qb);
    q_rope.select(1, 2 * m + 1).copy_(gr * qb - gi * qa);
    if (biased) {
      const auto ba = bk_nope.select(1, a), bb = bk_nope.select(1, b);  // [Hkv]
      const auto sb_re = (ur * ba + ui * bb).sum(), sb_im = (ur * bb - ui * ba).sum();
      bk_rope[2 * m] = sb_re;
      bk_rope[2 * m + 1] = sb_im;
      bk_nope.select(1, a).copy_(ba - (ur * sb_re - ui * sb_im));
      bk_nope.select(1, b).copy_(bb - (ur * sb_im + ui * sb_re));
      const auto pa = bq64.select(1, a), pb = bq64.select(1, b);  // [H]
      bq_rope.select(1, 2 * m).copy_(gr.squeeze(1) * pa + gi.squeeze(1) * pb);
      bq_rope.select(1, 2 * m + 1).copy_(gr.squeeze(1) * pb - gi.squeeze(1) * pa);
    }
  }
  DecoupledRopeSplit out;
  out.wk_nope = wk_nope.reshape({hkv * dh, d}).to(at::kFloat);
  out.k_rope = k_rope.to(at::kFloat);
  out.q_rope = q_rope.reshape({h * w, d}).to(at::kFloat);
  if (biased) {
    out.bk_nope = bk_nope.reshape({-1}).to(at::kFloat);
    out.bk_rope = bk_rope.to(at::kFloat);
    out.bq_rope = bq_rope.reshape({-1}).to(at::kFloat);
  }
  out.shared_rope_energy = kept_energy > 0 ? shared_energy / kept_energy : 1.0;
  out.kept_plane_energy = total > 0 ? kept_energy / total : 0.0;
  return out;
}

}  // namespace lrkv
