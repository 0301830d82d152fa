// The body of WeightMatVec, compiled once per ISA (weight_matvec_{avx512,avx2,
// generic}.cc define LRKV_MATVEC_NS and their target flags): a row of W is
// widened into a per-thread fp32 buffer (exact), then dotted with each
// activation row by an OpenMP SIMD reduction, which the compiler vectorises for
// the build's ISA. Include only from those translation units.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include "kernels/bf16_row_chunks.h"
#endif

#include "kernels/weight_matvec.h"

namespace lrkv::kernels::LRKV_MATVEC_NS {
namespace {

inline float Bf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float F16(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((man & 0x400) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

void Widen(const WeightMatVecParams& p, int64_t row, float* out) {
  const int64_t n = p.cols;
  if (p.dtype == WeightDType::kF32) {
    std::memcpy(out, static_cast<const float*>(p.w) + row * n,
                n * sizeof(float));
    return;
  }
  const uint16_t* w = static_cast<const uint16_t*>(p.w) + row * n;
  if (p.dtype == WeightDType::kBF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = Bf16(w[i]);
    return;
  }
#if defined(__F16C__)
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i*>(w + i))));
  }
  for (; i < n; ++i) out[i] = F16(w[i]);
#else
  for (int64_t i = 0; i < n; ++i) out[i] = F16(w[i]);
#endif
}

// Weight element -> fp32, exactly: bf16 is the high half of an fp32; staged f16
// rows (see Run) and fp32 are already fp32.
inline float Widened(uint16_t b) { return Bf16(b); }
inline float Widened(float f) { return f; }

// Four outputs at once: four independent accumulator chains (one chain is bound
// by the FMA latency, not by memory, in fp64 and for batches), one pass over x.
template <typename W, typename T>
void Dot4(const W* w, int64_t stride, const T* x, int64_t n, T* out) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  const W *w0 = w, *w1 = w + stride, *w2 = w + 2 * stride, *w3 = w + 3 * stride;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t i = 0; i < n; ++i) {
    s0 += static_cast<T>(Widened(w0[i])) * x[i];
    s1 += static_cast<T>(Widened(w1[i])) * x[i];
    s2 += static_cast<T>(Widened(w2[i])) * x[i];
    s3 += static_cast<T>(Widened(w3[i])) * x[i];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

template <typename W, typename T>
T Dot(const W* w, const T* x, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<T>(Widened(w[i])) * x[i];
  return s;
}

constexpr int64_t kRowBlock = 4;

// Rows o..o+n-1 of W (n <= kRowBlock) times every x row into y.
template <typename W, typename T>
void Block(const W* w, int64_t o, int64_t n, const WeightMatVecParams& p,
           const T* x, T* y) {
  T out[kRowBlock];
  for (int64_t b = 0; b < p.batch; ++b) {
    const T* xb = x + b * p.cols;
    T* yb = y + b * p.rows + o;
    if (n == kRowBlock) {
      Dot4(w, p.cols, xb, p.cols, out);
      for (int64_t j = 0; j < kRowBlock; ++j) yb[j] = out[j];
    } else {
      for (int64_t j = 0; j < n; ++j) yb[j] = Dot(w + j * p.cols, xb, p.cols);
    }
  }
}

#if defined(__AVX2__) && defined(__FMA__)
// A decode step of several sequences (verify steps 4-10 engines at once) by
// hand: GCC's vectorisation of a many-accumulator `omp simd` reduction spilled
// the accumulators to the stack, and Dot4 per x row re-widens each weight
// element once per row (three instructions to its one multiply-add in
// float64). Vector types of an fp32 or float64 x.
struct F32Lanes {
  using T = float;
  using V = __m256;
  static constexpr int kLanes = 8;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* x) { return _mm256_loadu_ps(x); }
  static V Widen(const uint16_t* w) {  // bf16 -> fp32: the high half
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(w))),
        16));
  }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float Sum(V v) {
    __m128 s =
        _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
};
struct F64Lanes {
  using T = double;
  using V = __m256d;
  static constexpr int kLanes = 4;
  static V Zero() { return _mm256_setzero_pd(); }
  static V Load(const double* x) { return _mm256_loadu_pd(x); }
  static V Widen(const uint16_t* w) {
    return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(
        _mm_cvtepu16_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w))),
        16)));
  }
  static V Widen(const float* w) { return _mm256_cvtps_pd(_mm_loadu_ps(w)); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static double Sum(V v) {
    __m128d s =
        _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
};

// Rows w0, w1 of W against B x rows (x[b * cols ...]): 2·B accumulators, each
// weight vector widened once for the B rows. y0[b * y_stride] and the element
// after it receive the two outputs of x row b.
template <typename L, int B, typename W>
void TwoRows(const W* w0, const W* w1, const typename L::T* x, int64_t cols,
             typename L::T* y0, int64_t y_stride) {
  using T = typename L::T;
  typename L::V a0[B], a1[B];
  for (int b = 0; b < B; ++b) a0[b] = a1[b] = L::Zero();
  int64_t i = 0;
  for (; i + L::kLanes <= cols; i += L::kLanes) {
    const auto u = L::Widen(w0 + i), v = L::Widen(w1 + i);
    for (int b = 0; b < B; ++b) {
      const auto xb = L::Load(x + b * cols + i);
      a0[b] = L::Fma(u, xb, a0[b]);
      a1[b] = L::Fma(v, xb, a1[b]);
    }
  }
  for (int b = 0; b < B; ++b) {
    T s0 = L::Sum(a0[b]), s1 = L::Sum(a1[b]);
    for (int64_t k = i; k < cols; ++k) {
      s0 += static_cast<T>(Widened(w0[k])) * x[b * cols + k];
      s1 += static_cast<T>(Widened(w1[k])) * x[b * cols + k];
    }
    y0[b * y_stride] = s0;
    y0[b * y_stride + 1] = s1;
  }
}

// Rows o..o+3 of W times every x row, two weight rows and up to four x rows at
// a time (8 accumulators, 11 of the 16 vector registers).
template <typename L, typename W>
void BatchBlock(const W* w, int64_t o, const WeightMatVecParams& p,
                const typename L::T* x, typename L::T* y) {
  for (int64_t j = 0; j < kRowBlock; j += 2) {
    const W *w0 = w + j * p.cols, *w1 = w0 + p.cols;
    for (int64_t b = 0; b < p.batch; b += 4) {
      const typename L::T* xb = x + b * p.cols;
      typename L::T* yb = y + b * p.rows + o + j;
      switch (std::min<int64_t>(4, p.batch - b)) {
        case 4:
          TwoRows<L, 4>(w0, w1, xb, p.cols, yb, p.rows);
          break;
        case 3:
          TwoRows<L, 3>(w0, w1, xb, p.cols, yb, p.rows);
          break;
        case 2:
          TwoRows<L, 2>(w0, w1, xb, p.cols, yb, p.rows);
          break;
        default:
          TwoRows<L, 1>(w0, w1, xb, p.cols, yb, p.rows);
      }
    }
  }
}

// Whether BatchBlock serves x rows of T against p's weights.
template <typename T>
bool Batched(const WeightMatVecParams& p) {
  return p.batch >= 2 &&
         (p.dtype == WeightDType::kBF16 ||
          (p.dtype == WeightDType::kF32 && std::is_same_v<T, double>));
}

template <typename T>
void RunBatchBlock(const WeightMatVecParams& p, int64_t o, const T* x, T* y) {
  using L = std::conditional_t<std::is_same_v<T, double>, F64Lanes, F32Lanes>;
  if (p.dtype == WeightDType::kBF16) {
    BatchBlock<L>(static_cast<const uint16_t*>(p.w) + o * p.cols, o, p, x, y);
  } else if constexpr (std::is_same_v<T, double>) {
    BatchBlock<L>(static_cast<const float*>(p.w) + o * p.cols, o, p, x, y);
  }
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
// bf16 weights against fp32 activations, by hand: a 32-bit lane holding the
// bf16 pair (w[2i], w[2i+1]) is w[2i+1] as fp32 once its low half is cleared
// and w[2i] once shifted left by 16 — two exact widenings without unpacking —
// met by x split into its even and odd elements (`xe`, `xo`, zero-padded to
// whole 32-element chunks). One row at a time (a sequential stream; four
// interleaved rows streamed slower), software- prefetched; the compiler's
// version of Dot4 reached 13-20 GB/s here. One row of W against one split x
// row.
float Bf16Row(const uint16_t* w, int64_t cols, const float* xe,
              const float* xo) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  bf16_rows::ForEachChunk<1>(w, cols, [&](const __m512i(&v)[1], int64_t i) {
    a0 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v[0], 16)),
                         _mm512_loadu_ps(xe + i / 2), a0);
    a1 = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v[0], high)),
                         _mm512_loadu_ps(xo + i / 2), a1);
  });
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// R rows of W against B split x rows at once (a decode step of B sequences):
// each 32-element chunk of a row is loaded and widened once and met by every x
// row, and each x chunk is loaded once for the R rows; R·B accumulators stay in
// registers. `xs`: the x rows interleaved by chunk — for each 32-column chunk
// c, row b's 16 even then 16 odd elements at xs[c * chunk_stride + 32 * b] — so
// that a chunk's x vectors are one contiguous run (prefetched as a stream)
// rather than 2·B scattered ones.
template <int R, int B>
void Bf16RowsBatch(const uint16_t* w, int64_t cols, const float* xs,
                   int64_t chunk_stride, float* out, int64_t out_stride) {
  __m512 acc[R][B];
  bf16_rows::ZeroSums(acc);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  bf16_rows::ForEachChunk<R>(w, cols, [&](const __m512i(&v)[R], int64_t i) {
    __m512 lo[R], hi[R];
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v[r], 16));
      hi[r] = _mm512_castsi512_ps(_mm512_and_si512(v[r], high));
    }
    const float* xc = xs + (i / 32) * chunk_stride;
    for (int b = 0; b < B; ++b) {
      const __m512 xe = _mm512_loadu_ps(xc + 32 * b);
      const __m512 xo = _mm512_loadu_ps(xc + 32 * b + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][b] =
            _mm512_fmadd_ps(hi[r], xo, _mm512_fmadd_ps(lo[r], xe, acc[r][b]));
      }
    }
  });
  bf16_rows::StoreSums<R, B>(acc, out, out_stride);
}

void RunBf16(const WeightMatVecParams& p) {
  const int64_t half =
      (p.cols + 31) / 32 * 16;  // even (and odd) elements, padded
  std::vector<float> split(2 * half * p.batch, 0.0f);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.cols; ++i)
      split[(2 * b + (i & 1)) * half + i / 2] = p.x[b * p.cols + i];
  }
  // The same elements interleaved by chunk for the batched kernel
  // (Bf16RowsBatch).
  const int64_t chunks = half / 16, stride = 32 * p.batch;
  std::vector<float> xs(p.batch >= 4 ? chunks * stride : 0, 0.0f);
  for (int64_t c = 0; c < chunks && p.batch >= 4; ++c) {
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int parity = 0; parity < 2; ++parity) {
        std::memcpy(&xs[c * stride + 32 * b + 16 * parity],
                    &split[(2 * b + parity) * half + 16 * c],
                    16 * sizeof(float));
      }
    }
  }
  const auto* w = static_cast<const uint16_t*>(p.w);
  bf16_rows::ForEachRowGroup<2>(
      p.rows, p.cols, p.batch,
      [&](int64_t o, int64_t b, auto r, auto rows_of_b) {
        Bf16RowsBatch<decltype(r)::value, decltype(rows_of_b)::value>(
            w + o * p.cols, p.cols, &xs[32 * b], stride, &p.y[b * p.rows + o],
            p.rows);
      },
      [&](int64_t o, int64_t b, auto r) {
        for (int64_t row = o; row < o + decltype(r)::value; ++row) {
          p.y[b * p.rows + row] =
              Bf16Row(w + row * p.cols, p.cols, &split[2 * b * half],
                      &split[(2 * b + 1) * half]);
        }
      });
}
#endif

template <typename T>
void Run(const WeightMatVecParams& p, const T* x, T* y) {
  // Threads only where the matrix is worth it (a few hundred KB and up).
  const bool parallel =
      p.rows * p.cols >= (1 << 17) && omp_get_max_threads() > 1;
  const int64_t blocks = (p.rows + kRowBlock - 1) / kRowBlock;
#pragma omp parallel if (parallel)
  {
    std::vector<float> staged(p.dtype == WeightDType::kF16 ? kRowBlock * p.cols
                                                           : 0);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t o = blk * kRowBlock, n = std::min(kRowBlock, p.rows - o);
#if defined(__AVX2__) && defined(__FMA__)
      if (n == kRowBlock && Batched<T>(p)) {
        RunBatchBlock(p, o, x, y);
        continue;
      }
#endif
      switch (p.dtype) {
        case WeightDType::kBF16:
          Block(static_cast<const uint16_t*>(p.w) + o * p.cols, o, n, p, x, y);
          break;
        case WeightDType::kF32:
          Block(static_cast<const float*>(p.w) + o * p.cols, o, n, p, x, y);
          break;
        case WeightDType::kF16:  // widened by F16C into a staging block first
          for (int64_t j = 0; j < n; ++j)
            Widen(p, o + j, staged.data() + j * p.cols);
          Block(staged.data(), o, n, p, x, y);
          break;
      }
    }
  }
}

}  // namespace

void WeightMatVecImpl(const WeightMatVecParams& p) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (p.x64 == nullptr && p.dtype == WeightDType::kBF16) return RunBf16(p);
#endif
  if (p.x64 != nullptr) {
    Run(p, p.x64, p.y64);
  } else {
    Run(p, p.x, p.y);
  }
}

}  // namespace lrkv::kernels::LRKV_MATVEC_NS
