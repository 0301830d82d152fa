// Dequantization of GGUF block types (see block_quant.h).
#include "base/block_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace lrkv {
namespace {

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

void Q8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<int8_t>(b[2 + i]);
}

void Q4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int i = 0; i < 16; ++i) {
    y[i] = d * ((b[2 + i] & 0xf) - 8);
    y[16 + i] = d * ((b[2 + i] >> 4) - 8);
  }
}

void QuantizeQ8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127;
  const float id = d != 0 ? 1 / d : 0;
  const uint16_t h = FloatToHalf(d);
  std::memcpy(b, &h, 2);
  for (int i = 0; i < 32; ++i)
    b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[i] * id)));
}

void QuantizeQ4_0(const float* x, uint8_t* b) {
  float amax = 0, max = 0;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = max / -8;
  const float id = d != 0 ? 1 / d : 0;
  const uint16_t h = FloatToHalf(d);
  std::memcpy(b, &h, 2);
  for (int i = 0; i < 16; ++i) {
    const int lo =
        std::min(15, static_cast<int>(static_cast<int8_t>(x[i] * id + 8.5f)));
    const int hi = std::min(
        15, static_cast<int>(static_cast<int8_t>(x[16 + i] * id + 8.5f)));
    b[2 + i] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// Scale and min of sub-block j (0..7) from the 12 packed bytes: the first four
// sub-blocks keep theirs in the low 6 bits of bytes 0-3 / 4-7; the last four split
// theirs into a low nibble (bytes 8-11) and the top 2 bits of bytes 0-3 / 4-7.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void Q4_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  // Four groups of 64 values: the low nibbles of 32 bytes, then their high nibbles,
  // each half with its own sub-block scale and min.
  for (int g = 0; g < 4; ++g) {
    uint8_t sc0, m0, sc1, m1;
    ScaleMinK4(2 * g, scales, &sc0, &m0);
    ScaleMinK4(2 * g + 1, scales, &sc1, &m1);
    for (int l = 0; l < 32; ++l) {
      y[64 * g + l] = d * sc0 * (qs[32 * g + l] & 0xf) - dmin * m0;
      y[64 * g + 32 + l] = d * sc1 * (qs[32 * g + l] >> 4) - dmin * m1;
    }
  }
}

void Q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  // Two halves of 128 values; value v of a half takes its low 4 bits from ql and its
  // high 2 bits from qh, and the scale of its 16-value sub-block.
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = ql[64 * h + l], hi = ql[64 * h + 32 + l], top = qh[32 * h + l];
      const int q[4] = {(lo & 0xf) | ((top & 3) << 4), (hi & 0xf) | (((top >> 2) & 3) << 4),
                        (lo >> 4) | (((top >> 4) & 3) << 4), (hi >> 4) | (((top >> 6) & 3) << 4)};
      for (int k = 0; k < 4; ++k) {
        const int v = 128 * h + 32 * k + l;
        y[v] = d * sc[v / 16] * (q[k] - 32);
      }
    }
  }
}

}  // namespace

size_t BlockValues(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
      return 32;
    case DType::kQ4_K:
    case DType::kQ6_K: return 256;
    default: return 0;
  }
}

size_t BlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0: return kQ8_0BlockBytes;
    case DType::kQ4_0:
      return kQ4_0BlockBytes;
    case DType::kQ4_K: return kQ4_KBlockBytes;
    case DType::kQ6_K: return kQ6_KBlockBytes;
    default: return 0;
  }
}

void DequantizeBlocks(DType dtype, const uint8_t* src, size_t n, float* dst) {
  const size_t values = BlockValues(dtype), bytes = BlockBytes(dtype);
  for (size_t i = 0; i < n / values; ++i) {
    const uint8_t* b = src + i * bytes;
    float* y = dst + i * values;
    switch (dtype) {
      case DType::kQ8_0: Q8_0(b, y); break;
      case DType::kQ4_0:
        Q4_0(b, y);
        break;
      case DType::kQ4_K: Q4_K(b, y); break;
      case DType::kQ6_K: Q6_K(b, y); break;
      default: break;
    }
  }
}

void QuantizeBlocks(DType dtype, const float* src, size_t n, uint8_t* dst) {
  const size_t bytes = BlockBytes(dtype);
  for (size_t i = 0; i < n / 32; ++i) {
    if (dtype == DType::kQ8_0) QuantizeQ8_0(src + 32 * i, dst + bytes * i);
    if (dtype == DType::kQ4_0) QuantizeQ4_0(src + 32 * i, dst + bytes * i);
  }
}

}  // namespace lrkv
