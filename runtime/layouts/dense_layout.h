// The runtime type of the dense K/V layout: per-head K and V (the source's
// attention, GQA, MQA); see runtime/kv_layout.h.
#ifndef LRKV_RUNTIME_LAYOUTS_DENSE_LAYOUT_H_
#define LRKV_RUNTIME_LAYOUTS_DENSE_LAYOUT_H_

#include "runtime/kv_layout.h"

namespace lrkv {

const KvLayoutType& DenseLayout();

}  // namespace lrkv

#endif  // LRKV_RUNTIME_LAYOUTS_DENSE_LAYOUT_H_
