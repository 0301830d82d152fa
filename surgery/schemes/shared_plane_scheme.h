// LRKV with shared planes (surgery/shared_plane.h): the key's residual is
// H_kv·r/2 latent rotation planes that all heads share, each read by every head
// through a complex factor; the values are the usual per-head LRKV. One rank
// for every layer (the latent planes are shared within a layer).
#ifndef LRKV_SURGERY_SCHEMES_SHARED_PLANE_SCHEME_H_
#define LRKV_SURGERY_SCHEMES_SHARED_PLANE_SCHEME_H_

#include <memory>

#include "surgery/kv_scheme.h"

namespace lrkv {

// Null unless the target is LRKV with --rope-mode shared-plane.
std::unique_ptr<KvScheme> MakeSharedPlaneScheme(const SchemeSetup& setup);

}  // namespace lrkv

#endif  // LRKV_SURGERY_SCHEMES_SHARED_PLANE_SCHEME_H_
