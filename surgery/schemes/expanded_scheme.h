// The source's own expanded attention (MHA, or the source's GQA): every layer
// kept as it is. A conversion to it copies the model; ExpandModel (converter.h)
// expands any layout back to it.
#ifndef LRKV_SURGERY_SCHEMES_EXPANDED_SCHEME_H_
#define LRKV_SURGERY_SCHEMES_EXPANDED_SCHEME_H_

#include <memory>

#include "surgery/kv_scheme.h"

namespace lrkv {

// Null unless the target is the source's attention (variant mha).
std::unique_ptr<KvScheme> MakeExpandedScheme(const SchemeSetup& setup);

}  // namespace lrkv

#endif  // LRKV_SURGERY_SCHEMES_EXPANDED_SCHEME_H_
