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
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (kernels::CacheDType t : kernels::kCacheDTypes)
      n.push_back(kernels::CacheDTypeName(t));
    return n;
  }();
  return names;
}

CacheDtype CacheDtypeOf(kernels::CacheDType kind) {
  CacheDtype c;
  c.kind = kind;
  c.name = kernels::CacheDTypeName(kind);
  c.dtype = kind == kernels::CacheDType::kBF16 ? at::kBFloat16 : at::kFloat;
  if (kind == kernels::CacheDType::kQ8_0) c.blocks = DType::kQ8_0;
  if (kind == kernels::CacheDType::kQ4_0) c.blocks = DType::kQ4_0;
  return c;
}

absl::StatusOr<CacheDtype> ParseCacheDtype(const std::string& name) {
  for (kernels::CacheDType t : kernels::kCacheDTypes) {
    if (name == kernels::CacheDTypeName(t)) return CacheDtypeOf(t);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown cache dtype '", name,
                   "'; valid: ", absl::StrJoin(CacheDtypeNames(), ", ")));
}

}  // namespace lrkv
