// Complex principal directions of a RoPE plane across heads (see header).
#include "surgery/complex_planes.h"

namespace lrkv {

std::vector<PlaneDirection> PlaneDirections(const at::Tensor& a,
                                            const at::Tensor& b,
                                            double* trace) {
  const auto gram = at::complex(at::matmul(a, a.t()) + at::matmul(b, b.t()),
                                at::matmul(b, a.t()) - at::matmul(a, b.t()));
  auto [evals, evecs] = at::linalg_eigh(gram);
  *trace = at::real(gram.diagonal()).sum().item<double>();
  std::vector<PlaneDirection> out;
  for (int64_t k = 0; k < gram.size(0); ++k) {
    auto u = evecs.select(1, k);  // unit, defined up to a phase
    const auto big = u.abs().argmax().item<int64_t>();
    if (u[big].abs().item<double>() > 0) u = u * (u[big].abs() / u[big]);
    out.push_back({evals[k].item<double>(), at::real(u).contiguous(),
                   at::imag(u).contiguous()});
  }
  return out;
}

std::pair<at::Tensor, at::Tensor> MixPlane(const PlaneDirection& u,
                                           const at::Tensor& a,
                                           const at::Tensor& b) {
  auto mix = [](const at::Tensor& c, const at::Tensor& x) {  // Σ_h c_h x_h
    return at::matmul(c.unsqueeze(0), x).squeeze(0);
  };
  return {mix(u.re, a) + mix(u.im, b), mix(u.re, b) - mix(u.im, a)};
}

std::pair<at::Tensor, at::Tensor> SpreadPlane(const PlaneDirection& u,
                                              const at::Tensor& s_re,
                                              const at::Tensor& s_im) {
  const auto ur = u.re.unsqueeze(1), ui = u.im.unsqueeze(1);
  return {ur * s_re.unsqueeze(0) - ui * s_im.unsqueeze(0),
          ur * s_im.unsqueeze(0) + ui * s_re.unsqueeze(0)};
}

}  // namespace lrkv
