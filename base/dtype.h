// Element types of checkpoint tensors and their conversion to float32.
#ifndef LRKV_BASE_DTYPE_H_
#define LRKV_BASE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace lrkv {

// Every dtype the safetensors format defines, then the GGUF block-quantized types
// lrkv dequantizes on load (block_quant.h). The runtime reads F32, F16, BF16 and those.
enum class DType {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kQ8_0,
  kQ4_0,
  kQ4_K,
  kQ6_K,
};

// Bytes per element; 0 for block types (see TensorBytes).
size_t DTypeSize(DType dtype);
// Bytes of `numel` elements stored as `dtype`; nullopt when a block type's blocks do not
// divide `row` (the innermost dimension) or the size overflows.
std::optional<uint64_t> TensorBytes(DType dtype, uint64_t numel, uint64_t row);
// The safetensors spelling ("F32", "BF16", ...); ggml's for block types ("Q4_K").
const char* DTypeName(DType dtype);
// Inverse of DTypeName over the safetensors dtypes only; nullopt for other names.
std::optional<DType> ParseDTypeName(std::string_view name);
// The storage a user names for written weight matrices: "f32", "f16", "bf16" or
// transformers' torch_dtype spelling ("float32", "float16", "bfloat16"); nullopt
// for anything else.
std::optional<DType> ParseWeightDType(std::string_view name);
// transformers' torch_dtype for F32, F16 and BF16 ("float32", ...); "float32" otherwise.
const char* TorchDTypeName(DType dtype);
// True for the dtypes model weights may be stored in (ConvertToFloat32 reads them).
bool IsFloatWeightDType(DType dtype);

float HalfToFloat(uint16_t h);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToHalf(float f);      // round to nearest even
// Round to nearest even. Inline: the decode kernels round every query and
// softmax weight with it, and the call per element measured 2-17 % of the
// LRKV step at the paper shape with L = 512.
inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Converts n little-endian elements of a float weight dtype into float32 (block types:
// n is a multiple of the block's values).
void ConvertToFloat32(DType dtype, const void* src, size_t n, float* dst);

// NaN and infinite elements among n little-endian F32, F16 or BF16 values (from the
// exponent bits, without converting: a multi-GB bf16 checkpoint is checked in place).
struct NonFiniteCount {
  uint64_t nan = 0, inf = 0;
};
NonFiniteCount CountNonFinite(DType dtype, const void* src, size_t n);

}  // namespace lrkv

#endif  // LRKV_BASE_DTYPE_H_
