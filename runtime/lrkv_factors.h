// The factors of an LRKV layer's K or V projection as the factored engine
// (lrkv_engine.cc) reads them, and the float32 loops of its decode step: the
// per-row work around the projections and the attention kernel, which as ATen
// expressions (a few kilobytes per operand, a dispatch and an allocation each)
// made the plane step 6-12 % slower than the expanded one at context 16 at the
// Qwen3-0.6B shape, and -1 to +2 % with these loops and one product for shared
// and down (`bench generate --context 16 --tokens 48 --mode plane`, three
// runs).
#ifndef LRKV_RUNTIME_LRKV_FACTORS_H_
#define LRKV_RUNTIME_LRKV_FACTORS_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/llama_weights.h"
#include "runtime/rope.h"

namespace lrkv {

struct Factors {
  at::Tensor shared, shared_bias;  // [dh, d], [dh] (undefined without biases)
  at::Tensor down;                 // [Hkv, r, d]
  at::Tensor up;                   // [Hkv, dh, r]
  at::Tensor delta;                // [Hkv, dh] (zeros without biases)
  at::Tensor up_rows;              // up transposed, [Hkv, r, dh], contiguous
  // [dh + Hkv·r, d]: shared and down as one matrix where they lie adjacent in
  // memory (lrkv writes them so: one product, one pass and one parallel region
  // for both); undefined otherwise.
  at::Tensor shared_and_down;
};

Factors FactorsOf(const LowRankProjection& p, int64_t hkv, int64_t dh);

// Σ_j a[b, h, g, j] · up[h, c, j] for latents a [B, Hkv, G, r]: each head
// group's latents taken back up by its B_h, [B, Hkv, G, dh].
at::Tensor UpProject(const at::Tensor& a, const Factors& f);

// The coordinates each latent of each head selects when B_h picks whole RoPE
// planes (latent pair m = plane planes[h][m]); InvalidArgument otherwise.
absl::Status PlaneStructure(const at::Tensor& up, const Rope& rope,
                            int64_t layer, at::Tensor* coords,
                            at::Tensor* planes);

// Whether the float32 loops below serve these operands: float32, contiguous,
// on the CPU, without gradients (every decode step of a float32 engine;
// float64 twins and healing take the ATen expressions).
bool FloatLoopsServe(std::initializer_list<at::Tensor> operands);

// QK-norm's σ = 1/sqrt(mean(k²) + eps) of the keys k_h = k_s + B_h z_h + δ_h
// that shared keys ks [N, dh] and latents zk [N, Hkv, r] rebuild: [N, Hkv],
// or [N, 1] over every head's coordinates (`over_heads`). k as UpProject
// rounds it; the squares summed in float64.
at::Tensor KeyNormScales(const at::Tensor& ks, const at::Tensor& zk,
                         const Factors& k, bool over_heads, double eps);

// (z + bias) ⊙ gamma for latents z [N, Hkv, r] and bias, gamma [Hkv, r]:
// plane mode folds the K bias and γ on the latent's coordinates in before the
// write-time rotation.
at::Tensor ScaledLatents(const at::Tensor& z, const at::Tensor& bias,
                         const at::Tensor& gamma);

// q[n, h, coords[h / g, j]] for rotated queries q [N, H, dh] and each KV
// head's plane coordinates coords [Hkv, r] (int64): [N, H, r], contiguous.
at::Tensor QueryPlaneCoordinates(const at::Tensor& q, const at::Tensor& coords);

// out + B_hⱽ latent + δ_hⱽ for the kernel's outputs out [N, H, dh] and
// latent [N, H, r] (query head h reads KV head h / g): [N, H, dh]. The same
// float32 sums, in the same order, as Grouped(out) + UpProject(latent) + δ.
at::Tensor ValueResult(const at::Tensor& out, const at::Tensor& latent,
                       const Factors& v);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_LRKV_FACTORS_H_
