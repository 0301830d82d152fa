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
  // One query head with one KV head: the source's own attention.
  return KvVariantTypeOf(KvVariant::kMha).FromModel(config);
}

}  // namespace lrkv
