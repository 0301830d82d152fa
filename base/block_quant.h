// GGUF block-quantized types: Q8_0 and the K-quants Q4_K and Q6_K read on load
// (the ones most downloaded), and Q8_0 and Q4_0 written by the decode engines'
// quantized KV caches, dequantized to float32 exactly as ggml defines them
// (block layouts of ggml-common.h: one fp16 scale per 32 int8 values, or per 32
// 4-bit values stored as the low nibbles of 16 bytes for the first 16 and their
// high nibbles for the rest; 256-value super blocks with 6-bit packed sub-block
// scales and mins, or 8-bit sub-block scales over 6-bit values split into low
// nibbles and high bit pairs).
#ifndef LRKV_MODEL_BLOCK_QUANT_H_
#define LRKV_MODEL_BLOCK_QUANT_H_

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace lrkv {

inline constexpr size_t kQ8_0BlockBytes = 34;   // fp16 d, int8 q[32]
inline constexpr size_t kQ4_0BlockBytes =
    18;  // fp16 d, 4-bit q[32] in 16 bytes
inline constexpr size_t kQ4_KBlockBytes = 144;  // fp16 d, fp16 dmin, scales[12], qs[128]
inline constexpr size_t kQ6_KBlockBytes = 210;  // ql[128], qh[64], int8 scales[16], fp16 d

// Values one block holds (32 or 256) and its bytes; 0 for other dtypes.
size_t BlockValues(DType dtype);
size_t BlockBytes(DType dtype);

// Dequantizes n values (a multiple of BlockValues) of a block type.
void DequantizeBlocks(DType dtype, const uint8_t* src, size_t n, float* dst);

// Quantizes n values (a multiple of 32) to Q8_0 or Q4_0 blocks as ggml's
// reference quantizers do (quantize_row_q8_0_ref, quantize_row_q4_0_ref): Q8_0
// scales by max|x|/127 and rounds half away from zero; Q4_0 scales by the value
// of largest magnitude over -8 and truncates x/d + 8.5 into [0, 15].
void QuantizeBlocks(DType dtype, const float* src, size_t n, uint8_t* dst);

}  // namespace lrkv

#endif  // LRKV_MODEL_BLOCK_QUANT_H_
