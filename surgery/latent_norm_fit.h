// The latent norm of MLA with decoupled RoPE (DeepSeek-V3's kv_a_layernorm,
// which llama.cpp's deepseek2 and stock DeepSeek code always apply): the latent
// c = kv_down·x is read as γ ⊙ c / s with s = sqrt(mean(c²) + ε), a per-token
// scale no weight can absorb (it scales the RoPE-free key and the value, not
// the rotated key). The conversion has three freedoms, used in this order:
//
// 1. The latent's basis. Without the norm, c' = R c with kv_down' = R·kv_down
//    and U' = U·R⁻¹ (U = [k_up; v_up]) is the same model for any invertible R;
//    with it, R decides how much s varies by token. The factorisation's basis
//    puts most of the energy in a few directions, so s follows those few
//    coordinates. Whitening the latent (R = Σ^{-1/2}, Σ the calibration
//    latents' second moment, eigenvalues floored at 1e-4 of the largest)
//    spreads it over all d_c coordinates, so s is a mean of d_c comparable
//    terms and varies less. Without calibration inputs the same rule uses
//    Σ = P·Pᵀ, P = kv_down·diag(w): the second moment for isotropic unit-RMS
//    inputs, what a pre-norm block's RMSNorm with weight w feeds the layer.
// 2. γ, per dimension: γ = argmin Σ_t ‖U (c_t − γ ⊙ c_t / s_t)‖², a d_c × d_c
//    linear system (G ∘ A) γ = (G ∘ B)·1 with G = UᵀU, A = Σ a aᵀ,
//    B = Σ a cᵀ, a_t = c_t / s_t. γ is what DeepSeek's layout stores and
//    healing trains.
// 3. The up-projections, refitted for the normalised latent n_t = γ ⊙ a_t:
//    U ← U·M with M = argmin Σ_t ‖c_t − M n_t‖² + λ‖M − I‖², the
//    least-squares map from what the norm outputs back to the linear latent,
//    shrunk towards γ's own solution M = I.
// The choices are made on held-out samples: every fourth calibration sample is
// kept out of the fits, and of {factorisation's basis, whitened} × {no refit,
// λ = 10⁻⁴…1 of Σ n nᵀ's mean diagonal} the candidate with the least error on
// those samples is kept. A d_c² map fitted on a few thousand tokens can
// interpolate them (a layer whose inputs are a few hundred distinct token
// embeddings did, and its held-out perplexity went from 26 to 299), so
// judging on unseen samples is what keeps the refit honest. The reported error
// is the kept candidate's on the held-out samples.
// Without calibration inputs only 1 applies and γ = s̄·1 with s̄² the latent's
// mean square for those isotropic inputs.
#ifndef LRKV_SURGERY_LATENT_NORM_FIT_H_
#define LRKV_SURGERY_LATENT_NORM_FIT_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <limits>

namespace lrkv {

struct LatentNormFit {
  at::Tensor kv_down;  // [d_c, d] float32, in the chosen basis
  at::Tensor up;       // [m, d_c] float32, [k_up; v_up] in that basis, refitted
  at::Tensor gamma;    // [d_c] float32
  bool whitened = false;  // the whitened basis was kept (1 above)
  bool refitted = false;  // the up-projections were refitted (3 above)
  // sqrt(Σ‖U c − U' (γ⊙c'/s')‖² / Σ‖U c‖²) over the held-out calibration
  // samples: the relative error the norm adds to the RoPE-free keys and the
  // values before healing. NaN when fitted without inputs.
  double rel_error = std::numeric_limits<double>::quiet_NaN();
  // The same error with the factorisation's basis and γ alone (no refit), on
  // the same samples: what the basis and the refit bought. NaN without inputs.
  double plain_rel_error = std::numeric_limits<double>::quiet_NaN();
  int64_t samples = 0;
};

// `kv_down` [d_c, d]; `up` [m, d_c] (k_up and v_up stacked); `inputs` [n, d]
// attention inputs of the source layer, or undefined; `input_scale` [d] the
// attention norm's weight (the data-free rule's), or undefined for unit scale;
// `eps` the model's rms_norm_eps.
LatentNormFit FitLatentNorm(const at::Tensor& kv_down, const at::Tensor& up,
                            const at::Tensor& inputs,
                            const at::Tensor& input_scale, double eps);

}  // namespace lrkv

#endif  // LRKV_SURGERY_LATENT_NORM_FIT_H_
