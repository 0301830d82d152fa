// MLA with decoupled RoPE (the DeepSeek layout): a RoPE-free latent of d_c
// elements plus one rotated key of 2·rope_planes_kept dims that all heads
// share, cached beside it; each query head gets its own rotated part
// (surgery/decoupled_rope.h). An approximation of the source (rotation is lost
// on the latent part), measured by the evaluation.
#ifndef LRKV_SURGERY_SCHEMES_DECOUPLED_MLA_SCHEME_H_
#define LRKV_SURGERY_SCHEMES_DECOUPLED_MLA_SCHEME_H_

#include <memory>

#include "surgery/kv_scheme.h"

namespace lrkv {

// Null unless the target is MLA with --rope-mode partial.
std::unique_ptr<KvScheme> MakeDecoupledMlaScheme(const SchemeSetup& setup);

}  // namespace lrkv

#endif  // LRKV_SURGERY_SCHEMES_DECOUPLED_MLA_SCHEME_H_
