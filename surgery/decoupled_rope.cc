// The RoRoPE split of MLA with decoupled RoPE (see header).
#include "surgery/decoupled_rope.h"

#include "model/rope.h"

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
    const auto coords = at::tensor({a, b}, at::kLong);
    const auto rows = wk_nope.index_select(1, coords);  // [Hkv, 2, d]
    const auto wr = whiten(rows);
    const auto gram = at::einsum("hcd,gcd->hg", {wr, wr});  // [Hkv, Hkv]
    auto [evals, evecs] = at::linalg_eigh(gram);
    auto u =
        evecs.select(1, hkv - 1).contiguous();  // the top principal direction
    if (u.sum().item<double>() < 0) u = -u;     // a fixed sign: reproducible
    kept_energy += gram.trace().item<double>();
    shared_energy += evals[hkv - 1].item<double>();
    const auto pair = at::einsum("h,hcd->cd", {u, rows});  // [2, d]
    k_rope.narrow(0, 2 * m, 2).copy_(pair);
    wk_nope.index_copy_(1, coords,
                        rows - u.view({hkv, 1, 1}) * pair.unsqueeze(0));
    // Query head j (KV head j / group) meets head j / group's weight in the
    // pair.
    const auto uq = u.repeat_interleave(group).view({h, 1, 1});
    q_rope.narrow(1, 2 * m, 2).copy_(uq * wq64.index_select(1, coords));
    if (biased) {
      const auto brows = bk_nope.index_select(1, coords);  // [Hkv, 2]
      const auto bpair = at::einsum("h,hc->c", {u, brows});
      bk_rope.narrow(0, 2 * m, 2).copy_(bpair);
      bk_nope.index_copy_(1, coords,
                          brows - u.view({hkv, 1}) * bpair.unsqueeze(0));
      bq_rope.narrow(1, 2 * m, 2)
          .copy_(uq.view({h, 1}) * bq64.index_select(1, coords));
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
