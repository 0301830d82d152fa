// LRKV in reconstruct, plane and partial RoPE modes (see lrkv_scheme.h).
#include "surgery/schemes/lrkv_scheme.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "base/status_macros.h"
#include "runtime/rope.h"
#include "surgery/schemes/scheme_util.h"

namespace lrkv {

LrkvScheme::LrkvScheme(const SchemeSetup& setup)
    : KvScheme(setup),
      hkv_(setup.source->num_kv_heads),
      dh_(setup.source->head_dim),
      uniform_dec_(setup.source->num_layers),
      curve_shared_(setup.source->num_layers) {
  converted_.kv.layout = KvLayout::kLrkv;
  converted_.kv.rank = target_.rank;
  converted_.kv.rope_mode = options_.rope_mode;
  converted_.kv.rope_planes_kept = kept_;
}

LrkvDecompositionOptions LrkvScheme::KeyOptions(int64_t layer,
                                                Planes* planes) const {
  LrkvDecompositionOptions k = ValueOptions(target_.rank);
  const Rope rope(source_, layer);
  *planes = HeadPlanes(rope);
  if (options_.rope_mode == RopeMode::kPlane) {
    k.support = ResidualSupport::kRopePlanes;
    k.planes = *planes;
  } else if (options_.rope_mode == RopeMode::kPartial) {
    k.support = ResidualSupport::kExcludeCoords;
    for (int64_t p = 0; p < std::min(kept_, rope.planes()); ++p) {
      k.excluded.push_back((*planes)[p].first);
      k.excluded.push_back((*planes)[p].second);
    }
  }
  return k;
}

LrkvDecompositionOptions LrkvScheme::ValueOptions(int64_t rank) const {
  LrkvDecompositionOptions v;
  v.rank = rank;
  v.max_iters = options_.max_iters;
  v.tol = options_.tol;
  return v;
}

absl::StatusOr<LrkvScheme::KvDecomposition> LrkvScheme::DecomposeKv(
    const SourceLayer& layer, const LrkvDecompositionOptions& key, int64_t rank,
    const SharedKv* warm) const {
  LrkvDecompositionOptions ko = key, vo = ValueOptions(rank);
  ko.rank = rank;
  if (warm != nullptr) {
    ko.initial_shared = warm->first;
    vo.initial_shared = warm->second;
  }
  absl::StatusOr<LrkvDecomposition> kv_dec[2];
  at::parallel_for(0, 2, 1, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      kv_dec[j] = j == 0 ? DecomposeLrkv(HeadsOf(layer.kv.wk, hkv_, dh_),
                                         layer.whitening, ko)
                         : DecomposeLrkv(HeadsOf(layer.kv.wv, hkv_, dh_),
                                         layer.whitening, vo);
    }
  });
  RETURN_IF_ERROR(kv_dec[0].status());
  RETURN_IF_ERROR(kv_dec[1].status());
  return KvDecomposition{std::move(*kv_dec[0]), std::move(*kv_dec[1])};
}

void LrkvScheme::SetFactors(const KvDecomposition& kv, int64_t r,
                            const Planes& planes,
                            const LrkvDecompositionOptions& key,
                            const LayerWeights& src, LayerWeights* l) const {
  l->k_lr = ToProjection(kv.first, hkv_, r);
  l->v_lr = ToProjection(kv.second, hkv_, r);
  SplitBias(src.bk, hkv_, dh_, &l->k_lr);
  SplitBias(src.bv, hkv_, dh_, &l->v_lr);
  if (l->k_lr.head_bias.defined() &&
      options_.rope_mode != RopeMode::kReconstruct) {
    // A per-head key bias must live where the residual does (the selected
    // planes, or the position-free coordinates) for the factored decode to stay
    // exact; the rest of it is dropped, an approximation of the source.
    auto keep = at::zeros({hkv_, dh_}, at::kFloat);
    for (int64_t h = 0; h < hkv_; ++h) {
      if (options_.rope_mode == RopeMode::kPlane) {
        if (h >= static_cast<int64_t>(kv.first.planes_chosen.size()))
          continue;  // r = 0
        for (int64_t p : kv.first.planes_chosen[h]) {
          keep[h][planes[p].first] = 1;
          keep[h][planes[p].second] = 1;
        }
      } else {
        keep[h].fill_(1);
        for (int64_t c : key.excluded) keep[h][c] = 0;
      }
    }
    l->k_lr.head_bias =
        (l->k_lr.head_bias.view({hkv_, dh_}) * keep).reshape({-1});
  }
  l->wk = l->wv = l->bk = l->bv = at::Tensor();
}

absl::StatusOr<LayerErrorCurve> LrkvScheme::Curve(const SourceLayer& layer,
                                                  const CandidateLoss* loss) {
  const int64_t i = layer.index, uniform = uniform_size();
  Planes planes;
  const LrkvDecompositionOptions key = KeyOptions(i, &planes);
  // Converged decompositions on a grid of ranks around the uniform one (every
  // rank for small heads), each warm-started from its neighbour towards the
  // uniform.
  const int64_t top = dh_ - static_cast<int64_t>(key.excluded.size());
  const int64_t unit = options_.rope_mode == RopeMode::kPlane ? 2 : 1;
  const std::vector<int64_t> grid = CurveGrid(uniform, unit, top, kCurveSteps);
  std::vector<double> errors(grid.size());
  const size_t mid =
      std::find(grid.begin(), grid.end(), uniform) - grid.begin();
  for (int dir : {+1, -1}) {
    std::optional<SharedKv> prev;
    for (size_t g = mid; g < grid.size(); g += dir) {
      if (dir < 0 && g == mid) {
        prev = curve_shared_[i].at(uniform);
        continue;
      }
      ASSIGN_OR_RETURN(
          KvDecomposition kv,
          DecomposeKv(layer, key, grid[g], prev ? &*prev : nullptr));
      prev = curve_shared_[i][grid[g]] =
          SharedKv{kv.first.shared, kv.second.shared};
      if (loss != nullptr) {
        LayerWeights candidate;
        SetFactors(kv, grid[g], planes, key, layer.kv, &candidate);
        ASSIGN_OR_RETURN(errors[g], (*loss)(grid[g], std::move(candidate)));
      } else {
        errors[g] = kv.first.objective.back() + kv.second.objective.back();
      }
      if (g == mid) uniform_dec_[i] = std::move(kv);
      if (dir < 0 && g == 0) break;
    }
  }
  LayerErrorCurve curve;
  curve.sizes = grid;
  curve.errors = errors;
  return curve;
}

absl::StatusOr<LayerReport> LrkvScheme::ConvertLayer(const SourceLayer& layer,
                                                     LayerWeights* l) {
  const int64_t i = layer.index, size = LayerSize(i);
  Planes planes;
  const LrkvDecompositionOptions key = KeyOptions(i, &planes);
  // The curves pass's uniform decomposition is reused at the uniform size and
  // its S warm-starts the others.
  KvDecomposition kv;
  if (uniform_dec_[i] && size == uniform_size()) {
    kv = std::move(*uniform_dec_[i]);
  } else {
    const auto warm = curve_shared_[i].find(size);
    ASSIGN_OR_RETURN(
        kv,
        DecomposeKv(layer, key, size,
                    warm != curve_shared_[i].end() ? &warm->second : nullptr));
  }
  uniform_dec_[i].reset();
  curve_shared_[i].clear();
  SetFactors(kv, size, planes, key, layer.kv, l);
  LayerReport row;
  row.layer = i;
  row.k = ReportOf(kv.first);
  row.v = ReportOf(kv.second);
  row.size = size;
  return row;
}

std::unique_ptr<KvScheme> MakeLrkvScheme(const SchemeSetup& setup) {
  if (setup.target.variant != KvVariant::kLrkv ||
      setup.options->rope_mode == RopeMode::kSharedPlane) {
    return nullptr;
  }
  return std::make_unique<LrkvScheme>(setup);
}

}  // namespace lrkv
