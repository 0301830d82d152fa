// The runtime type of the MLA layout: a latent and its up-projections, with or
// without decoupled RoPE; see runtime/kv_layout.h.
#ifndef LRKV_RUNTIME_LAYOUTS_MLA_LAYOUT_H_
#define LRKV_RUNTIME_LAYOUTS_MLA_LAYOUT_H_

#include "runtime/kv_layout.h"

namespace lrkv {

const KvLayoutType& MlaLayout();

}  // namespace lrkv

#endif  // LRKV_RUNTIME_LAYOUTS_MLA_LAYOUT_H_
