// The registry of K/V layout types (see kv_layout.h).
#include "runtime/kv_layout.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "runtime/layouts/dense_layout.h"
#include "runtime/layouts/lrkv_layout.h"
#include "runtime/layouts/mla_layout.h"

namespace lrkv {

const KvLayoutType& KvLayoutTypeOf(KvLayout layout) {
  // Indexed by KvLayout: kDense, kLrkv, kMla.
  static const std::array<const KvLayoutType*, 3> kTypes = {
      &DenseLayout(), &LrkvLayout(), &MlaLayout()};
  return *kTypes[static_cast<size_t>(layout)];
}

std::string LayerTensorName(int64_t layer, const std::string& rest) {
  return absl::StrCat("model.layers.", layer, ".", rest);
}

}  // namespace lrkv
