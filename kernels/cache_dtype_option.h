// The `--cache-dtype` list option of the commands that take several KV-cache
// storages (bench decode, bench generate, compare): every storage by its name
// (kernels/decode_params.h), declared once.
#ifndef LRKV_KERNELS_CACHE_DTYPE_OPTION_H_
#define LRKV_KERNELS_CACHE_DTYPE_OPTION_H_

#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "base/option_schema.h"
#include "kernels/decode_params.h"

namespace lrkv::kernels {

// The names of `storages`, in order ("bf16", "q8").
inline std::vector<std::string> NamesOf(
    const std::vector<CacheDType>& storages) {
  std::vector<std::string> names;
  for (CacheDType t : storages) names.push_back(CacheDTypeName(t));
  return names;
}

template <typename Options, typename Field>
OptionSpec<Options>& AddCacheDtypesOption(OptionSchema<Options>& s, Field field,
                                          std::string help) {
  return s.ChoiceList(
      "cache_dtype", field,
      std::vector<CacheDType>(std::begin(kCacheDTypes), std::end(kCacheDTypes)),
      [](CacheDType t) { return std::string(CacheDTypeName(t)); },
      std::move(help));
}

}  // namespace lrkv::kernels

#endif  // LRKV_KERNELS_CACHE_DTYPE_OPTION_H_
