// The latent norm of MLA with decoupled RoPE (DeepSeek-V3's kv_a_layernorm,
// which llama.cpp's deepseek2 and stock DeepSeek code always apply): the latent
// c = kv_down·x is read as γ ⊙ c / s with s = sqrt(mean(c²) + ε), a per-token
// scale no weight can absorb (it scales the RoPE-free key and the value, not
// the rotated key). The conversion keeps k_up and v_up as the factorisation
// gave them and fits γ so that the normalised latent reproduces the linear one
// through them:
//
//   γ = argmin Σ_t ‖U (c_t − γ ⊙ c_t / s_t)‖²,   U = [k_up; v_up],
//
// a d_c × d_c linear system (G ∘ A) γ = (G ∘ B)·1 with G = UᵀU, A = Σ a aᵀ,
// B = Σ a cᵀ, a_t = c_t / s_t. Why γ alone and not a full up-projection
// correction M: what the norm changes is a per-token scalar 1/s_t, which no
// fixed linear map undoes (the best M in the isotropic case is a multiple of
// I); a per-dimension γ takes what the dimensions' scales correlate with s_t,
// stays where DeepSeek's layout puts it, and healing trains it with the rest.
// Without calibration inputs: γ = s̄·1 with s̄² = ‖kv_down·diag(w)‖²_F / d_c + ε,
// the latent's mean square for inputs w ⊙ n, n isotropic of unit RMS (what a
// pre-norm block's RMSNorm with weight w feeds the projections).
#ifndef LRKV_SURGERY_LATENT_NORM_FIT_H_
#define LRKV_SURGERY_LATENT_NORM_FIT_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <limits>

namespace lrkv {

struct LatentNormFit {
  at::Tensor gamma;  // [d_c] float32
  // sqrt(Σ‖U(c − γ⊙c/s)‖² / Σ‖U c‖²) over the calibration inputs: the relative
  // error the norm adds to the RoPE-free keys and the values before healing.
  // NaN when fitted without inputs.
  double rel_error = std::numeric_limits<double>::quiet_NaN();
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
