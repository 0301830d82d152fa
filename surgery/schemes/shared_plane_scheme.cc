// LRKV with shared planes (see shared_plane_scheme.h).
#include "surgery/schemes/shared_plane_scheme.h"

#include <ATen/Parallel.h>

#include "base/status_macros.h"
#include "runtime/rope.h"
#include "surgery/schemes/lrkv_scheme.h"
#include "surgery/schemes/scheme_util.h"
#include "surgery/shared_plane.h"

namespace lrkv {
namespace {

class SharedPlaneScheme final : public LrkvScheme {
 public:
  using LrkvScheme::LrkvScheme;

  // One latent plane set per layer: per-layer ranks are refused
  // (ResolveTarget).
  bool sized() const override { return false; }

  absl::StatusOr<LayerReport> ConvertLayer(const SourceLayer& layer,
                                           LayerWeights* l) override {
    const int64_t i = layer.index, size = LayerSize(i);
    const Planes planes = HeadPlanes(Rope(source_, i));
    // K: H_kv·r/2 latent planes shared by the heads; V: the usual per-head
    // LRKV.
    absl::StatusOr<SharedPlaneDecomposition> kd;
    absl::StatusOr<LrkvDecomposition> vd;
    at::parallel_for(0, 2, 1, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        if (j == 0) {
          kd = DecomposeSharedPlanes(HeadsOf(layer.kv.wk, hkv_, dh_),
                                     layer.whitening, planes, hkv_ * size / 2,
                                     options_.max_iters, options_.tol);
        } else {
          vd = DecomposeLrkv(HeadsOf(layer.kv.wv, hkv_, dh_), layer.whitening,
                             ValueOptions(size));
        }
      }
    });
    RETURN_IF_ERROR(kd.status());
    RETURN_IF_ERROR(vd.status());
    l->k_lr = kd->projection;
    l->v_lr = ToProjection(*vd, hkv_, size);
    l->wk = l->wv = l->bk = l->bv = at::Tensor();
    LayerReport row;
    row.layer = i;
    row.k.objective = kd->objective;
    row.k.final_objective = kd->objective.back();
    row.k.head_rel_error = kd->head_rel_error;
    row.k.rel_error = kd->rel_error;
    row.k.converged = kd->converged;
    row.k.planes = {kd->planes};
    row.v = ReportOf(*vd);
    row.size = size;
    return row;
  }
};

}  // namespace

std::unique_ptr<KvScheme> MakeSharedPlaneScheme(const SchemeSetup& setup) {
  if (setup.target.variant != KvVariant::kLrkv ||
      setup.options->rope_mode != RopeMode::kSharedPlane) {
    return nullptr;
  }
  return std::make_unique<SharedPlaneScheme>(setup);
}

}  // namespace lrkv
