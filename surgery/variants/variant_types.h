// The registered K/V variant types (kv_variant.h), one factory per file.
#ifndef LRKV_SURGERY_VARIANTS_VARIANT_TYPES_H_
#define LRKV_SURGERY_VARIANTS_VARIANT_TYPES_H_

#include <memory>

#include "surgery/kv_variant.h"

namespace lrkv {

std::unique_ptr<KvVariantType> MakeMhaVariant();
std::unique_ptr<KvVariantType> MakeGqaVariant();
std::unique_ptr<KvVariantType> MakeMqaVariant();
std::unique_ptr<KvVariantType> MakeMlaVariant();
std::unique_ptr<KvVariantType> MakeLrkvVariant();

}  // namespace lrkv

#endif  // LRKV_SURGERY_VARIANTS_VARIANT_TYPES_H_
