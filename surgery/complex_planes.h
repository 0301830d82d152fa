// A RoPE plane of several heads read as complex numbers: plane (a, b) of head h
// is the complex row w_h = W_h[a] + i·W_h[b], and RoPE multiplies it by
// e^{iθt}, so any per-head complex factor commutes with it (TransMLA's RoRoPE
// observation). Shared by the decoupled-RoPE MLA split and the shared-plane
// LRKV residual.
#ifndef LRKV_SURGERY_COMPLEX_PLANES_H_
#define LRKV_SURGERY_COMPLEX_PLANES_H_

#include <ATen/ATen.h>

#include <utility>
#include <vector>

namespace lrkv {

// One principal direction u (unit, over the heads) of a plane, and its energy.
struct PlaneDirection {
  double energy = 0;
  at::Tensor re, im;  // [H]
};

// The eigen-directions of the heads' Hermitian Gram G = W Wᴴ for the plane rows
// a, b [H, d] (whitened when the metric is), largest energy last, each with the
// phase that makes its largest component real and positive (reproducible);
// `trace` gets tr(G).
std::vector<PlaneDirection> PlaneDirections(const at::Tensor& a,
                                            const at::Tensor& b, double* trace);

// s = Σ_h conj(u_h)·w_h for the plane rows a, b [H, d] (unwhitened): (Re s, Im
// s), [d].
std::pair<at::Tensor, at::Tensor> MixPlane(const PlaneDirection& u,
                                           const at::Tensor& a,
                                           const at::Tensor& b);

// u_h·s for every head: the (a, b) rows [H, d] the shared row s carries.
std::pair<at::Tensor, at::Tensor> SpreadPlane(const PlaneDirection& u,
                                              const at::Tensor& s_re,
                                              const at::Tensor& s_im);

}  // namespace lrkv

#endif  // LRKV_SURGERY_COMPLEX_PLANES_H_
