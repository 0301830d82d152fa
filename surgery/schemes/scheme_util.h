// Helpers the K/V schemes share: head views, LRKV factors in the runtime's
// layout, report rows from a decomposition, and the size grid of an
// allocation's curves.
#ifndef LRKV_SURGERY_SCHEMES_SCHEME_UTIL_H_
#define LRKV_SURGERY_SCHEMES_SCHEME_UTIL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/llama_weights.h"
#include "runtime/rope.h"
#include "surgery/conversion_report.h"
#include "surgery/lrkv_decomposition.h"

namespace lrkv {

// Sizes measured each side of the uniform one on an allocation's curve.
inline constexpr int64_t kCurveSteps = 4;

// Coordinates (within a head) of each plane a plane-mode residual may select:
// the RoPE rotation planes by frequency index, then the position-free pairs a
// partial rotary leaves (frequency 0, so selecting them is as exact as a
// rotation plane).
std::vector<std::pair<int64_t, int64_t>> HeadPlanes(const Rope& rope);

// [H_kv*dh, d] -> W [H_kv, d, dh] (docs/design.md's orientation: W_h is d ×
// d_h).
at::Tensor HeadsOf(const at::Tensor& w, int64_t hkv, int64_t dh);

// A projection's report row from its LRKV decomposition.
ProjectionReport ReportOf(const LrkvDecomposition& dec);

// The decomposition's factors at rank r in the runtime's layout (float32).
LowRankProjection ToProjection(const LrkvDecomposition& dec, int64_t hkv,
                               int64_t r);

// Splits per-head biases [H_kv*dh] into their mean and the per-head deltas.
void SplitBias(const at::Tensor& bias, int64_t hkv, int64_t dh,
               LowRankProjection* p);

// Sizes around `uniform` whose error curve a per-layer allocation measures:
// uniform ± k·step for k up to `steps` (every size for small ones), multiples
// of `unit`, within [0, top].
std::vector<int64_t> CurveGrid(int64_t uniform, int64_t unit, int64_t top,
                               int64_t steps);

}  // namespace lrkv

#endif  // LRKV_SURGERY_SCHEMES_SCHEME_UTIL_H_
