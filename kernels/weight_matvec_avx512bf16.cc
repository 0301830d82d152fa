// WeightMatVec with bf16-rounded activations (WeightMatVecParams::
// bf16_activations) on AVX512-BF16: VDPBF16PS multiplies 32 bf16 pairs of a W
// row and an x row and adds each pair's two products into one fp32 lane, so a
// 32-column chunk costs one instruction per (W row, x row) where the exact
// fp32 kernel (weight_matvec_impl.h) widens W and spends two FMAs. On this
// project's Zen 4 that is 3.3x the fp32 kernel's multiply-adds per second for
// 8 activation rows (one core, 3072 × 1024), which is what a batched decode
// step of 8 sequences is bound by. Compiled with -mavx512bf16; dispatched only
// where the CPU has it (weight_matvec.cc).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/bf16_row_chunks.h"
#include "kernels/weight_matvec.h"

namespace lrkv::kernels::avx512bf16 {
namespace {

// R rows of W against B bf16 x rows. `xs`: the x rows interleaved by 32-column
// chunk (chunk c of row b at xs[c * 32 * batch + 32 * b], zero-padded), so a
// chunk's x vectors are one contiguous run.
template <int R, int B>
void DotRows(const uint16_t* w, int64_t cols, const uint16_t* xs,
             int64_t chunk_stride, float* out, int64_t out_stride) {
  __m512 acc[R][B];
  bf16_rows::ZeroSums(acc);
  bf16_rows::ForEachChunk<R>(w, cols, [&](const __m512i(&v)[R], int64_t i) {
    const uint16_t* xc = xs + (i / 32) * chunk_stride;
    for (int b = 0; b < B; ++b) {
      const __m512bh x = (__m512bh)_mm512_loadu_si512(xc + 32 * b);
      for (int r = 0; r < R; ++r)
        acc[r][b] = _mm512_dpbf16_ps(acc[r][b], (__m512bh)v[r], x);
    }
  });
  bf16_rows::StoreSums<R, B>(acc, out, out_stride);
}

// x rows rounded to bf16 (nearest even, as VCVTNE2PS2BF16 does), interleaved
// by chunk for DotRows.
std::vector<uint16_t> RoundedChunks(const WeightMatVecParams& p) {
  const int64_t chunks = (p.cols + 31) / 32, stride = 32 * p.batch;
  std::vector<uint16_t> xs(chunks * stride, 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    const float* x = p.x + b * p.cols;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t i = 32 * c, n = std::min<int64_t>(32, p.cols - i);
      const __mmask16 lo = n >= 16 ? 0xffff : (__mmask16{1} << n) - 1;
      const __mmask16 hi =
          n <= 16 ? 0 : (n >= 32 ? 0xffff : (__mmask16{1} << (n - 16)) - 1);
      const __m512 a = _mm512_maskz_loadu_ps(lo, x + i);
      const __m512 h = _mm512_maskz_loadu_ps(hi, x + i + 16);
      _mm512_storeu_si512(&xs[c * stride + 32 * b],
                          (__m512i)_mm512_cvtne2ps_pbh(h, a));
    }
  }
  return xs;
}

}  // namespace

void WeightMatVecImpl(const WeightMatVecParams& p) {
  const std::vector<uint16_t> xs = RoundedChunks(p);
  const int64_t stride = 32 * p.batch;
  const auto* w = static_cast<const uint16_t*>(p.w);
  // R W rows from o against B x rows from b.
  auto rows = [&](int64_t o, int64_t b, auto r, auto rows_of_b) {
    DotRows<decltype(r)::value, decltype(rows_of_b)::value>(
        w + o * p.cols, p.cols, &xs[32 * b], stride, &p.y[b * p.rows + o],
        p.rows);
  };
  // Three W rows a group: 24 accumulators, 3 + 8 loads per 24 dot products.
  // For 8 activation rows over the Qwen3-0.6B shape's matrices (2 threads)
  // that took 37.7-38.8 ms a pass against 39.4-40.1 for pairs; one row at a
  // time, 63.
  bf16_rows::ForEachRowGroup<3>(
      p.rows, p.cols, p.batch, rows, [&](int64_t o, int64_t b, auto r) {
        rows(o, b, r, std::integral_constant<int, 1>());
      });
}

}  // namespace lrkv::kernels::avx512bf16
