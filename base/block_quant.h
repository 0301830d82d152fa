// GGUF block-quantized tensor types read on load: Q8_0 and the K-quants Q4_K and Q6_K
// (the ones most downloaded), dequantized to float32 exactly as ggml defines them
// (block layouts of ggml-common.h: one fp16 scale per 32 int8 values; 256-value super
// blocks with 6-bit packed sub-block scales and mins, or 8-bit sub-block scales over
// 6-bit values split into low nibbles and high bit pairs).
#ifndef LRKV_MODEL_BLOCK_QUANT_H_
#define LRKV_MODEL_BLOCK_QUANT_H_

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace lrkv {

inline constexpr size_t kQ8_0BlockBytes = 34;   // fp16 d, int8 q[32]
inline constexpr size_t kQ4_KBlockBytes = 144;  // fp16 d, fp16 dmin, scales[12], qs[128]
inline constexpr size_t kQ6_KBlockBytes = 210;  // ql[128], qh[64], int8 scales[16], fp16 d

// Values one block holds (32 or 256) and its bytes; 0 for other dtypes.
size_t BlockValues(DType dtype);
size_t BlockBytes(DType dtype);

// Dequantizes n values (a multiple of BlockValues) of a block type.
void DequantizeBlocks(DType dtype, const uint8_t* src, size_t n, float* dst);

}  // namespace lrkv

#endif  // LRKV_MODEL_BLOCK_QUANT_H_
