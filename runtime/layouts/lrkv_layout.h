// The runtime type of the LRKV layout: a shared projection plus per-head
// low-rank residuals; see runtime/kv_layout.h.
#ifndef LRKV_RUNTIME_LAYOUTS_LRKV_LAYOUT_H_
#define LRKV_RUNTIME_LAYOUTS_LRKV_LAYOUT_H_

#include "runtime/kv_layout.h"

namespace lrkv {

const KvLayoutType& LrkvLayout();

}  // namespace lrkv

#endif  // LRKV_RUNTIME_LAYOUTS_LRKV_LAYOUT_H_
