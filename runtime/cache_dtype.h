// The storage a user names for a decode engine's KV cache (`--cache-dtype`):
// the kernels' CacheDType and its name (kernels/decode_params.h: "f32",
// "bf16", or ggml's block types "q8" (Q8_0: 32 int8 values and an fp16 scale,
// 8.5 bits a value) and "q4" (Q4_0: 32 4-bit values and an fp16 scale, 4.5
// bits), as llama.cpp's --cache-type-k/-v q8_0 / q4_0 store them), with what
// an engine stores for it. One name, one meaning for every command that takes
// it (eval, bench decode/generate, serve, bench serve).
#ifndef LRKV_RUNTIME_CACHE_DTYPE_H_
#define LRKV_RUNTIME_CACHE_DTYPE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "kernels/decode_params.h"
#include "runtime/decode_engine.h"

namespace lrkv {

struct CacheDtype {
  kernels::CacheDType kind = kernels::CacheDType::kF32;
  std::string name;                   // kernels::CacheDTypeName(kind)
  at::ScalarType dtype = at::kFloat;  // EngineOptions::cache_dtype
  std::optional<DType> blocks;        // EngineOptions::cache_blocks
  // Bits a cached value takes, scales included (32, 16, 8.5, 4.5).
  double bits() const;
  // Sets the engine's storage.
  void ApplyTo(EngineOptions* options) const;
};

// Every name, in the order help lists them.
const std::vector<std::string>& CacheDtypeNames();

// InvalidArgument naming the choices for any other name.
absl::StatusOr<CacheDtype> ParseCacheDtype(const std::string& name);
CacheDtype CacheDtypeOf(kernels::CacheDType kind);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_CACHE_DTYPE_H_
