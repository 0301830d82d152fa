// GQA and MQA by pooling: each target KV head is the mean of the source KV
// heads its query group covers (weights, biases and OLMo-2's per-head key norm
// alike).
#ifndef LRKV_SURGERY_SCHEMES_POOLED_SCHEME_H_
#define LRKV_SURGERY_SCHEMES_POOLED_SCHEME_H_

#include <memory>

#include "surgery/kv_scheme.h"

namespace lrkv {

// Null unless the target is GQA or MQA.
std::unique_ptr<KvScheme> MakePooledScheme(const SchemeSetup& setup);

}  // namespace lrkv

#endif  // LRKV_SURGERY_SCHEMES_POOLED_SCHEME_H_
