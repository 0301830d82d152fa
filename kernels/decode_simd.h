// The SIMD layer and the online-softmax pieces shared by the decode kernels
// (decode_impl.h for the row layout, decode_tiled_avx512bf16.cc for the tiled
// one): a thin vector type written once for 16-lane (AVX-512) and 8-lane
// (AVX2) vectors, a vector exp, per-chunk softmax state and the merge of
// chunks.
// Include only from a kernel translation unit, after defining LRKV_KERNEL_NS.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__FMA__)
#include <immintrin.h>
#define LRKV_KERNEL_SIMD 16
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LRKV_KERNEL_SIMD 8
#endif

#include "kernels/decode_params.h"

// For the small helpers GCC left as calls in the kernels' hot loops (VSumMany
// took its accumulators through memory; VLoadN was a call per masked load).
#ifndef LRKV_KERNEL_INLINE
#define LRKV_KERNEL_INLINE inline __attribute__((always_inline))
#endif

namespace lrkv::kernels::LRKV_KERNEL_NS {
namespace {

constexpr int64_t kTile = 16;  // positions per online-softmax tile

inline float ToFloat(float x) { return x; }
inline float ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A thin SIMD layer so that the kernels below are written once for 16-lane
// (AVX-512) and 8-lane (AVX2) vectors; bf16 loads widen to fp32 by a 16-bit
// shift.
#if LRKV_KERNEL_SIMD == 16
using Vf = __m512;
constexpr int64_t kW = 16;
inline Vf VZero() { return _mm512_setzero_ps(); }
inline Vf VSet(float x) { return _mm512_set1_ps(x); }
inline Vf VLoad(const float* p) { return _mm512_loadu_ps(p); }
inline Vf VLoad(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline void VStore(float* p, Vf v) { _mm512_storeu_ps(p, v); }
// The first n < 16 lanes (masked: no scalar tails, no reads past the end).
#define LRKV_KERNEL_MASKED_TAIL 1
inline __mmask16 Mask(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1);
}
LRKV_KERNEL_INLINE Vf VLoadN(const float* p, int64_t n) {
  return _mm512_maskz_loadu_ps(Mask(n), p);
}
LRKV_KERNEL_INLINE Vf VLoadN(const uint16_t* p, int64_t n) {
  const __m256i h = _mm256_maskz_loadu_epi16(Mask(n), p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline void VStoreN(float* p, Vf v, int64_t n) {
  _mm512_mask_storeu_ps(p, Mask(n), v);
}
// x with its first k lanes zeroed.
inline Vf VZeroFirst(Vf x, int64_t k) {
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~Mask(k)), x);
}
// Masked loads cost a plain load here: runs end in one.
constexpr bool kPlainTails = false;
inline Vf VFma(Vf a, Vf b, Vf c) { return _mm512_fmadd_ps(a, b, c); }
inline Vf VAdd(Vf a, Vf b) { return _mm512_add_ps(a, b); }
inline float VSum(Vf v) { return _mm512_reduce_add_ps(v); }
// out[k] = Σ lanes of v[k] for 16 vectors at once: a transpose-and-add tree (45
// shuffles/adds instead of 16 separate reductions of ~8 each).
LRKV_KERNEL_INLINE void VSumMany(const Vf* v, float* out) {
  Vf u[8], w[4], z[2];
  for (int k = 0; k < 8; ++k) {
    u[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                         _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  }
  for (int k = 0; k < 4; ++k) {
    const __m512d a = _mm512_castps_pd(u[2 * k]),
                  b = _mm512_castps_pd(u[2 * k + 1]);
    w[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  for (int k = 0; k < 2; ++k) {
    z[k] = _mm512_add_ps(
        _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
        _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  _mm512_storeu_ps(
      out,
      _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1))));
}
// The pieces of VExp that differ between ISAs.
inline Vf VMul(Vf a, Vf b) { return _mm512_mul_ps(a, b); }
// max(a, b) per lane; b where a is NaN.
inline Vf VMax(Vf a, Vf b) { return _mm512_max_ps(a, b); }
inline Vf VClamp(Vf x, float lo, float hi) {
  return _mm512_min_ps(_mm512_max_ps(x, VSet(lo)), VSet(hi));
}
inline Vf VRound(Vf x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Vf VFnma(Vf a, Vf b, Vf c) { return _mm512_fnmadd_ps(a, b, c); }
// 2^n for integral n.
inline Vf VPow2(Vf n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
// y where x >= lo, else 0.
inline Vf VZeroBelow(Vf y, Vf x, float lo) {
  return _mm512_maskz_mov_ps(
      static_cast<__mmask16>(~_mm512_cmp_ps_mask(x, VSet(lo), _CMP_LT_OQ)), y);
}
#elif LRKV_KERNEL_SIMD == 8
using Vf = __m256;
constexpr int64_t kW = 8;
inline Vf VZero() { return _mm256_setzero_ps(); }
inline Vf VSet(float x) { return _mm256_set1_ps(x); }
inline Vf VLoad(const float* p) { return _mm256_loadu_ps(p); }
inline Vf VLoad(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline void VStore(float* p, Vf v) { _mm256_storeu_ps(p, v); }
// The first n < 8 lanes by vmaskmov, which reads no masked-off element (no
// fault past the end). Without these the latent runs of r = 47 (Qwen3-0.6B's
// rank at budget 0.5) ended in 7 scalar multiply-adds per row and head.
#define LRKV_KERNEL_MASKED_TAIL 1
inline __m256i LaneMask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
LRKV_KERNEL_INLINE Vf VLoadN(const float* p, int64_t n) {
  return _mm256_maskload_ps(p, LaneMask(n));
}
// bf16 has no 16-bit masked load: the 32-bit words holding the n elements are
// read from the 4-byte aligned address at or before p (an aligned word never
// crosses a page, so the element before p or after the n-th that shares a word
// with one of them is safe to read), shifted into place and cleared.
LRKV_KERNEL_INLINE Vf VLoadN(const uint16_t* p, int64_t n) {
  const int64_t odd =
      static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) >> 1) & 1;
  const int* base = reinterpret_cast<const int*>(p - odd);
  const __m128i words =
      _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>((n + odd + 1) / 2)),
                      _mm_setr_epi32(0, 1, 2, 3));
  __m128i h = _mm_maskload_epi32(base, words);
  if (odd != 0) h = _mm_srli_si128(h, 2);
  h = _mm_and_si128(h, _mm_cmpgt_epi16(_mm_set1_epi16(static_cast<short>(n)),
                                       _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline void VStoreN(float* p, Vf v, int64_t n) {
  _mm256_maskstore_ps(p, LaneMask(n), v);
}
inline Vf VZeroFirst(Vf x, int64_t k) {
  return _mm256_andnot_ps(_mm256_castsi256_ps(LaneMask(k)), x);
}
// A bf16 masked load is ~8 instructions here: a run of n >= kW elements that
// is not a whole number of vectors ends instead in a plain vector at
// [n - kW, n), overlapping the one before (its first lanes dropped: queries
// zeroed there, sums not stored).
constexpr bool kPlainTails = true;
inline Vf VFma(Vf a, Vf b, Vf c) { return _mm256_fmadd_ps(a, b, c); }
inline Vf VAdd(Vf a, Vf b) { return _mm256_add_ps(a, b); }
inline float VSum(Vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// out[k] = Σ lanes of v[k] for 8 vectors at once (transpose-and-add tree).
LRKV_KERNEL_INLINE void VSumMany(const Vf* v, float* out) {
  Vf u[4], w[2];
  for (int k = 0; k < 4; ++k) {
    u[k] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                         _mm256_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  }
  for (int k = 0; k < 2; ++k) {
    const __m256d a = _mm256_castps_pd(u[2 * k]),
                  b = _mm256_castps_pd(u[2 * k + 1]);
    w[k] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
                         _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
  }
  _mm256_storeu_ps(out,
                   _mm256_add_ps(_mm256_permute2f128_ps(w[0], w[1], 0x20),
                                 _mm256_permute2f128_ps(w[0], w[1], 0x31)));
}
inline Vf VMul(Vf a, Vf b) { return _mm256_mul_ps(a, b); }
inline Vf VMax(Vf a, Vf b) { return _mm256_max_ps(a, b); }
inline Vf VClamp(Vf x, float lo, float hi) {
  return _mm256_min_ps(_mm256_max_ps(x, VSet(lo)), VSet(hi));
}
inline Vf VRound(Vf x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Vf VFnma(Vf a, Vf b, Vf c) { return _mm256_fnmadd_ps(a, b, c); }
inline Vf VPow2(Vf n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline Vf VZeroBelow(Vf y, Vf x, float lo) {
  return _mm256_andnot_ps(_mm256_cmp_ps(x, VSet(lo), _CMP_LT_OQ), y);
}
#endif

#ifdef LRKV_KERNEL_SIMD
// exp for every lane (Cephes-style: range reduction by ln 2, degree-5
// polynomial, relative error ~2e-7); inputs below -87 flush to 0.
inline Vf VExp(Vf x) {
  const Vf in = x;
  x = VClamp(x, -87.3f, 88.3f);
  const Vf fx = VRound(VMul(x, VSet(1.44269504088896341f)));
  x = VFnma(fx, VSet(0.693359375f), x);
  x = VFnma(fx, VSet(-2.12194440e-4f), x);
  Vf y = VSet(1.9875691500e-4f);
  y = VFma(y, x, VSet(1.3981999507e-3f));
  y = VFma(y, x, VSet(8.3334519073e-3f));
  y = VFma(y, x, VSet(4.1665795894e-2f));
  y = VFma(y, x, VSet(1.6666665459e-1f));
  y = VFma(y, x, VSet(5.0000001201e-1f));
  y = VFma(y, VMul(x, x), VAdd(x, VSet(1.0f)));
  return VZeroBelow(VMul(y, VPow2(fx)), in, -87.3f);
}
#endif

// out[t] = exp(x[t] − m) for t < count; returns their sum.
inline float ExpShifted(const float* x, int64_t count, float m, float* out) {
  int64_t t = 0;
  float sum = 0;
#ifdef LRKV_KERNEL_SIMD
  Vf acc = VZero();
  const Vf mv = VSet(m);
  for (; t + kW <= count; t += kW) {
    const Vf e = VExp(VLoad(x + t) - mv);
    VStore(out + t, e);
    acc = VAdd(acc, e);
  }
  sum = VSum(acc);
#endif
  for (; t < count; ++t) sum += (out[t] = std::exp(x[t] - m));
  return sum;
}

// Running softmax state of one head over a chunk of positions.
struct HeadState {
  float m = -std::numeric_limits<float>::infinity();
  float l = 0;
};

// Raises a head's running maximum to m (>= st->m) and returns the factor its
// sums must be scaled by; exp runs only when the maximum moves (0 while the
// state is empty).
inline float RaiseMax(HeadState* st, float m) {
  if (m == st->m) return 1.0f;
  const float corr = std::exp(st->m - m);
  st->l *= corr;
  st->m = m;
  return corr;
}

// max(m, s[0:count]), whole vectors at a time where they fit (a scalar loop
// was a chain of count dependent maxima per head and tile). A NaN score is
// passed over, as std::max(m, s) does.
inline float MaxOf(const float* s, int64_t count, float m) {
  int64_t t = 0;
#ifdef LRKV_KERNEL_SIMD
  if (count >= kW) {
    Vf mv = VSet(m);
    for (; t + kW <= count; t += kW) mv = VMax(VLoad(s + t), mv);
    alignas(64) float lanes[kW];
    VStore(lanes, mv);
    for (int64_t l = 0; l < kW; ++l) m = std::max(m, lanes[l]);
  }
#endif
  for (; t < count; ++t) m = std::max(m, s[t]);
  return m;
}

// Folds a tile's scores s[0:count] into a head's state; rescales its
// accumulators (acc[0:n], acc2[0:n2]) and leaves the tile's weights in p.
inline void SoftmaxTile(HeadState* st, const float* s, int64_t count, float* p,
                        float* acc, int64_t n, float* acc2, int64_t n2) {
  const float m = MaxOf(s, count, st->m);
  const float corr = RaiseMax(st, m);
  st->l += ExpShifted(s, count, m, p);
  if (corr != 1.0f) {
    for (int64_t c = 0; c < n; ++c) acc[c] *= corr;
    for (int64_t c = 0; c < n2; ++c) acc2[c] *= corr;
  }
}

// Chunks per sequence: about four work items per thread (so that uneven chunks
// even out under dynamic scheduling), chunks of >= 256 positions.
inline int64_t SplitsFor(int64_t items, int64_t length) {
  const int64_t threads = omp_get_max_threads();
  int64_t splits = std::max<int64_t>(1, (4 * threads + items - 1) / items);
  splits = std::min(splits, std::max<int64_t>(1, length / 256));
  return splits;
}

// Merges per-chunk partial results (m, l, acc) of one head into out.
inline void MergeChunks(const std::vector<HeadState>& states,
                        const float* const* accs, int64_t splits, int64_t n,
                        float* out) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < splits; ++s) m = std::max(m, states[s].m);
  float l = 0;
  std::fill(out, out + n, 0.0f);
  for (int64_t s = 0; s < splits; ++s) {
    if (states[s].l == 0) continue;
    const float w = std::exp(states[s].m - m);
    l += w * states[s].l;
    for (int64_t c = 0; c < n; ++c) out[c] += w * accs[s][c];
  }
  const float inv = l > 0 ? 1.0f / l : 0.0f;
  for (int64_t c = 0; c < n; ++c) out[c] *= inv;
}

// Every kernel's merge: per (group, head) the chunks' states and accumulators
// ([item·H + h], n + r floats each, item = group·splits + split) become the
// first n outputs in out and the last r in out_latent, [group·H + h] each.
// Groups are sequences for the factored kernels (a·V_shared, a·Z_V) and
// (sequence, KV head) pairs for MHA (H = the group's heads, r = 0).
inline void MergeAllChunks(const std::vector<HeadState>& states,
                           const std::vector<float>& accs, int64_t groups,
                           int64_t splits, int64_t H, int64_t n, int64_t r,
                           float* out, float* out_latent) {
  const int64_t per_head = n + r;
  std::vector<float> merged(per_head);
  std::vector<HeadState> hs(splits);
  std::vector<const float*> ha(splits);
  for (int64_t grp = 0; grp < groups; ++grp) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t s = 0; s < splits; ++s) {
        hs[s] = states[(grp * splits + s) * H + h];
        ha[s] = &accs[((grp * splits + s) * H + h) * per_head];
      }
      MergeChunks(hs, ha.data(), splits, per_head, merged.data());
      std::copy(merged.begin(), merged.begin() + n, out + (grp * H + h) * n);
      if (r > 0) {
        std::copy(merged.begin() + n, merged.end(),
                  out_latent + (grp * H + h) * r);
      }
    }
  }
}

}  // namespace
}  // namespace lrkv::kernels::LRKV_KERNEL_NS
