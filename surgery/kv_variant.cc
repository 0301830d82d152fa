// The registry of K/V variant types (see kv_variant.h).
#include "surgery/kv_variant.h"

#include "surgery/variants/variant_types.h"

namespace lrkv {

int64_t KvVariantType::DecodeMacs(const AttentionShape& s, const KvConfig&,
                                  const std::string&, int64_t positions) const {
  // Every head dots each cached key and sums each cached value.
  return 2 * s.heads * positions * s.head_dim;
}

const std::vector<const KvVariantType*>& AllKvVariantTypes() {
  // In KvVariant order.
  static const auto* const types = new std::vector<const KvVariantType*>{
      MakeMhaVariant().release(), MakeGqaVariant().release(),
      MakeMqaVariant().release(), MakeMlaVariant().release(),
      MakeLrkvVariant().release()};
  return *types;
}

const KvVariantType& KvVariantTypeOf(KvVariant variant) {
  return *AllKvVariantTypes()[static_cast<size_t>(variant)];
}

KvConfig KvConfigOf(const ModelConfig& config) {
  for (const KvVariantType* t : AllKvVariantTypes()) {
    if (t->Describes(config)) return t->FromModel(config);
  }
  // Not reached: the dense types split every head count between them and the
  // factored ones every layout (kv_variant_test checks that exactly one
  // describes each); a layout with no type would read as the source's own.
  return KvVariantTypeOf(KvVariant::kMha).FromModel(config);
}

}  // namespace lrkv
