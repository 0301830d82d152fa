// libFuzzer target: the safetensors parser must reject or accept any input without
// reading outside it; accepted tensors are read end to end.
#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = lrkv::ParseSafetensors(absl::Span<const uint8_t>(data, size));
  if (!parsed.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& t : parsed->tensors) {
    for (uint64_t i = 0; i < t.nbytes; ++i) sink ^= t.data[i];
    if (lrkv::IsFloatWeightDType(t.dtype) && t.nbytes <= (1u << 20)) {
      float out[64];
      const size_t n = std::min<size_t>(64, t.nbytes / lrkv::DTypeSize(t.dtype));
      lrkv::ConvertToFloat32(t.dtype, t.data, n, out);
    }
  }
  return 0;
}
