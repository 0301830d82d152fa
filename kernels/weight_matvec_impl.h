// The body of WeightMatVec, compiled once per ISA (weight_matvec_{avx512,avx2,
// generic}.cc define LRKV_MATVEC_NS and their target flags): a row of W is widened into
// a per-thread fp32 buffer (exact), then dotted with each activation row by an OpenMP
// SIMD reduction, which the compiler vectorises for the build's ISA.
// Include only from those translation units.
#include <omp.h>

#include <cstring>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
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
    std::memcpy(out, static_cast<const float*>(p.w) + row * n, n * sizeof(float));
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
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i))));
  }
  for (; i < n; ++i) out[i] = F16(w[i]);
#else
  for (int64_t i = 0; i < n; ++i) out[i] = F16(w[i]);
#endif
}

template <typename T>
T Dot(const float* w, const T* x, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<T>(w[i]) * x[i];
  return s;
}

template <typename T>
void Run(const WeightMatVecParams& p, const T* x, T* y) {
  // Threads only where the matrix is worth it (a few hundred KB and up).
  const bool parallel = p.rows * p.cols >= (1 << 17) && omp_get_max_threads() > 1;
#pragma omp parallel if (parallel)
  {
    std::vector<float> row(p.cols);
#pragma omp for schedule(static)
    for (int64_t o = 0; o < p.rows; ++o) {
      Widen(p, o, row.data());
      for (int64_t b = 0; b < p.batch; ++b) {
        y[b * p.rows + o] = Dot(row.data(), x + b * p.cols, p.cols);
      }
    }
  }
}

}  // namespace

void WeightMatVecImpl(const WeightMatVecParams& p) {
  if (p.x64 != nullptr) {
    Run(p, p.x64, p.y64);
  } else {
    Run(p, p.x, p.y);
  }
}

}  // namespace lrkv::kernels::LRKV_MATVEC_NS
