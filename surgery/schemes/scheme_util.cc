// Helpers the K/V schemes share (see scheme_util.h).
#include "surgery/schemes/scheme_util.h"

#include <algorithm>

namespace lrkv {

std::vector<std::pair<int64_t, int64_t>> HeadPlanes(const Rope& rope) {
  std::vector<std::pair<int64_t, int64_t>> planes;
  for (int64_t p = 0; p < rope.head_planes(); ++p)
    planes.push_back(rope.PlaneCoordinates(p));
  return planes;
}

at::Tensor HeadsOf(const at::Tensor& w, int64_t hkv, int64_t dh) {
  return w.view({hkv, dh, -1}).transpose(1, 2);
}

ProjectionReport ReportOf(const LrkvDecomposition& dec) {
  ProjectionReport p;
  // The solver's own objective (with its gauge term), which never increases.
  p.objective = dec.gauged_objective;
  p.final_objective = dec.objective.back();
  p.head_rel_error = dec.head_rel_error;
  p.rel_error = dec.rel_error;
  p.planes = dec.planes_chosen;
  p.float32_steps = dec.float32_steps;
  p.converged = dec.converged;
  return p;
}

LowRankProjection ToProjection(const LrkvDecomposition& dec, int64_t hkv,
                               int64_t r) {
  LowRankProjection p;
  const int64_t d = dec.shared.size(0);
  p.shared = dec.shared.t().contiguous().to(at::kFloat);  // [dh, d]
  p.down = dec.down.transpose(1, 2)
               .reshape({hkv * r, d})
               .contiguous()
               .to(at::kFloat);
  p.up = dec.up.contiguous().to(at::kFloat);  // [hkv, dh, r]
  return p;
}

void SplitBias(const at::Tensor& bias, int64_t hkv, int64_t dh,
               LowRankProjection* p) {
  if (!bias.defined()) return;
  auto heads = bias.view({hkv, dh});
  p->shared_bias = heads.mean(0).contiguous();
  p->head_bias = (heads - p->shared_bias).reshape({-1}).contiguous();
}

std::vector<int64_t> CurveGrid(int64_t uniform, int64_t unit, int64_t top,
                               int64_t steps) {
  const int64_t step = std::max<int64_t>(unit, (uniform / 8) / unit * unit);
  std::vector<int64_t> grid;
  for (int64_t k = -steps; k <= steps; ++k) {
    const int64_t r = uniform + k * step;
    if (r >= 0 && r <= top) grid.push_back(r);
  }
  return grid;
}

}  // namespace lrkv
