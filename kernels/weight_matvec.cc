// Entry point, validation, reference and ISA dispatch of WeightMatVec.
#include "kernels/weight_matvec.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "kernels/decode_attention.h"

namespace lrkv::kernels {
namespace avx512 {
void WeightMatVecImpl(const WeightMatVecParams& p);
}
namespace avx2 {
void WeightMatVecImpl(const WeightMatVecParams& p);
}
namespace generic {
void WeightMatVecImpl(const WeightMatVecParams& p);
}
namespace avx512bf16 {
void WeightMatVecImpl(const WeightMatVecParams& p);
}

namespace {

double Element(const WeightMatVecParams& p, int64_t i) {
  if (p.dtype == WeightDType::kF32) return static_cast<const float*>(p.w)[i];
  const uint16_t h = static_cast<const uint16_t*>(p.w)[i];
  uint32_t bits;
  if (p.dtype == WeightDType::kBF16) {
    bits = static_cast<uint32_t>(h) << 16;
  } else {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) return (sign ? -1.0 : 1.0) * man * 0x1p-24;  // zero and subnormals
    bits = exp == 0x1f ? sign | 0x7f800000u | (man << 13)
                       : sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

absl::Status ValidateWeightMatVec(const WeightMatVecParams& p) {
  if (p.rows <= 0 || p.cols <= 0 || p.batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("weight mat-vec shape [", p.rows, ", ", p.cols,
                                                   "] x batch ", p.batch, " must be positive"));
  }
  const bool f32 = p.x != nullptr && p.y != nullptr && p.x64 == nullptr && p.y64 == nullptr;
  const bool f64 = p.x64 != nullptr && p.y64 != nullptr && p.x == nullptr && p.y == nullptr;
  if (p.w == nullptr || !(f32 || f64)) {
    return absl::InvalidArgumentError(
        "weight mat-vec needs W and exactly one of (x, y) fp32 or (x64, y64) fp64");
  }
  if (p.bf16_activations && (p.dtype != WeightDType::kBF16 || !f32)) {
    return absl::InvalidArgumentError(
        "weight mat-vec: bf16 activations need bf16 W and fp32 x");
  }
  return absl::OkStatus();
}

absl::Status WeightMatVec(const WeightMatVecParams& p) {
  if (auto s = ValidateWeightMatVec(p); !s.ok()) return s;
  // The decode kernels' choice (and its test override): every CPU with AVX2 and FMA
  // has F16C too, which the avx2 build's f16 widening uses.
  const std::string isa = KernelIsa();
  if (p.bf16_activations) {
    if (TiledKernelAvailable()) {
      avx512bf16::WeightMatVecImpl(p);
      return absl::OkStatus();
    }
    // Elsewhere: the same arithmetic as the exact kernel's products of the
    // rounded x (bf16 × bf16 is exact in fp32).
    std::vector<float> rounded(p.x, p.x + p.batch * p.cols);
    for (float& v : rounded) v = BFloat16ToFloat(FloatToBFloat16(v));
    WeightMatVecParams exact = p;
    exact.bf16_activations = false;
    exact.x = rounded.data();
    return WeightMatVec(exact);
  }
  if (isa == "avx512") {
    avx512::WeightMatVecImpl(p);
  } else if (isa == "avx2") {
    avx2::WeightMatVecImpl(p);
  } else {
    generic::WeightMatVecImpl(p);
  }
  return absl::OkStatus();
}

absl::Status WeightMatVecReference(const WeightMatVecParams& p) {
  if (auto s = ValidateWeightMatVec(p); !s.ok()) return s;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t o = 0; o < p.rows; ++o) {
      double s = 0;
      for (int64_t i = 0; i < p.cols; ++i) {
        double x =
            p.x64 != nullptr ? p.x64[b * p.cols + i] : p.x[b * p.cols + i];
        if (p.bf16_activations)
          x = BFloat16ToFloat(FloatToBFloat16(p.x[b * p.cols + i]));
        s += Element(p, o * p.cols + i) * x;
      }
      if (p.y64 != nullptr) {
        p.y64[b * p.rows + o] = s;
      } else {
        p.y[b * p.rows + o] = static_cast<float>(s);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace lrkv::kernels
