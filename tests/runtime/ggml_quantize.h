// Test-only quantizers to ggml's Q8_0, Q4_K and Q6_K block layouts (the inverse of
// base/block_quant.cc's decoding, written from the layout, not from its code), so
// that tests can write quantized GGUF files and let llama.cpp read them. Rounding is
// plain nearest: the quality of the encoding is not what the tests measure.
#ifndef LRKV_TESTS_RUNTIME_GGML_QUANTIZE_H_
#define LRKV_TESTS_RUNTIME_GGML_QUANTIZE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/dtype.h"

namespace lrkv::testing {

inline void PutHalf(float v, uint8_t* p) {
  const uint16_t h = FloatToHalf(v);
  std::memcpy(p, &h, 2);
}
inline float RoundedHalf(float v) { return HalfToFloat(FloatToHalf(v)); }

inline void QuantizeQ8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(x[i]));
  const float d = RoundedHalf(amax / 127);
  PutHalf(d, b);
  for (int i = 0; i < 32; ++i) {
    b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(d > 0 ? std::lround(x[i] / d) : 0));
  }
}

inline void QuantizeQ4_K(const float* x, uint8_t* b) {
  float scale[8], min[8];
  for (int j = 0; j < 8; ++j) {
    const float* s = x + 32 * j;
    const float lo = std::min(0.0f, *std::min_element(s, s + 32));
    const float hi = *std::max_element(s, s + 32);
    scale[j] = (hi - lo) / 15;
    min[j] = -lo;
  }
  const float d = RoundedHalf(*std::max_element(scale, scale + 8) / 63);
  const float dmin = RoundedHalf(*std::max_element(min, min + 8) / 63);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0 ? std::min<long>(63, std::lround(scale[j] / d)) : 0);
    m[j] = static_cast<uint8_t>(dmin > 0 ? std::min<long>(63, std::lround(min[j] / dmin)) : 0);
  }
  PutHalf(d, b);
  PutHalf(dmin, b + 2);
  uint8_t* scales = b + 4;
  for (int j = 0; j < 4; ++j) {
    scales[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
    scales[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
    scales[j + 8] = (sc[j + 4] & 0xf) | ((m[j + 4] & 0xf) << 4);
  }
  uint8_t q[256];
  for (int j = 0; j < 8; ++j) {
    const float step = d * sc[j], off = dmin * m[j];
    for (int l = 0; l < 32; ++l) {
      const long v = step > 0 ? std::lround((x[32 * j + l] + off) / step) : 0;
      q[32 * j + l] = static_cast<uint8_t>(std::clamp<long>(v, 0, 15));
    }
  }
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) b[16 + 32 * g + l] = q[64 * g + l] | (q[64 * g + 32 + l] << 4);
  }
}

inline void QuantizeQ6_K(const float* x, uint8_t* b) {
  float scale[16];
  for (int s = 0; s < 16; ++s) {
    float amax = 0;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::abs(x[16 * s + i]));
    scale[s] = amax / 31;
  }
  const float d = RoundedHalf(*std::max_element(scale, scale + 16) / 127);
  int8_t sc[16];
  uint8_t q[256];
  for (int s = 0; s < 16; ++s) {
    sc[s] = static_cast<int8_t>(d > 0 ? std::min<long>(127, std::lround(scale[s] / d)) : 0);
    const float step = d * sc[s];
    for (int i = 0; i < 16; ++i) {
      const long v = step > 0 ? std::lround(x[16 * s + i] / step) : 0;
      q[16 * s + i] = static_cast<uint8_t>(std::clamp<long>(v, -32, 31) + 32);
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* v = q + 128 * h + l;  // values l, l+32, l+64, l+96 of the half
      ql[64 * h + l] = (v[0] & 0xf) | ((v[64] & 0xf) << 4);
      ql[64 * h + 32 + l] = (v[32] & 0xf) | ((v[96] & 0xf) << 4);
      qh[32 * h + l] = (v[0] >> 4) | ((v[32] >> 4) << 2) | ((v[64] >> 4) << 4) | ((v[96] >> 4) << 6);
    }
  }
  std::memcpy(b + 192, sc, 16);
  PutHalf(d, b + 208);
}

// Quantizes n floats (a multiple of the block's values) into `dtype`'s blocks.
inline std::vector<uint8_t> Quantize(DType dtype, const float* x, size_t n) {
  const size_t values = dtype == DType::kQ8_0 ? 32 : 256;
  const size_t bytes = dtype == DType::kQ8_0 ? 34 : dtype == DType::kQ4_K ? 144 : 210;
  std::vector<uint8_t> out(n / values * bytes);
  for (size_t i = 0; i < n / values; ++i) {
    if (dtype == DType::kQ8_0) QuantizeQ8_0(x + i * values, out.data() + i * bytes);
    if (dtype == DType::kQ4_K) QuantizeQ4_K(x + i * values, out.data() + i * bytes);
    if (dtype == DType::kQ6_K) QuantizeQ6_K(x + i * values, out.data() + i * bytes);
  }
  return out;
}

}  // namespace lrkv::testing

#endif  // LRKV_TESTS_RUNTIME_GGML_QUANTIZE_H_
