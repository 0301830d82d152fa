// KV-cache storage names (see cache_dtype.h).
#include "runtime/cache_dtype.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/block_quant.h"

namespace lrkv {

double CacheDtype::bits() const {
  if (blocks) {
    return 8.0 * static_cast<double>(BlockBytes(*blocks)) /
           static_cast<double>(BlockValues(*blocks));
  }
  return dtype == at::kBFloat16 ? 16 : 32;
}

void CacheDtype::ApplyTo(EngineOptions* options) const {
  options->cache_dtype = dtype;
  options->cache_blocks = blocks;
}

const std::vector<std::string>& CacheDtypeNames() {
  static const std::vector<std::string> names = {"bf16", "f32", "q8", "q4"};
  return names;
}

absl::StatusOr<CacheDtype> ParseCacheDtype(const std::string& name) {
  if (name == "f32") return CacheDtype{name, at::kFloat, std::nullopt};
  if (name == "bf16") return CacheDtype{name, at::kBFloat16, std::nullopt};
  if (name == "q8") return CacheDtype{name, at::kFloat, DType::kQ8_0};
  if (name == "q4") return CacheDtype{name, at::kFloat, DType::kQ4_0};
  return absl::InvalidArgumentError(
      absl::StrCat("unknown cache dtype '", name,
                   "'; valid: ", absl::StrJoin(CacheDtypeNames(), ", ")));
}

}  // namespace lrkv
