// MLA with exact RoPE (see exact_mla_scheme.h).
#include "surgery/schemes/exact_mla_scheme.h"

#include "base/status_macros.h"
#include "surgery/baselines.h"
#include "surgery/schemes/scheme_util.h"

namespace lrkv {

ExactMlaScheme::ExactMlaScheme(const SchemeSetup& setup) : KvScheme(setup) {
  converted_.kv.layout = KvLayout::kMla;
  converted_.kv.latent = target_.latent;
  converted_.kv.rope_mode = options_.rope_mode;
  converted_.kv.rope_planes_kept = kept_;
}

at::Tensor ExactMlaScheme::CompressedKey(const SourceLayer& layer) const {
  return layer.kv.wk;
}

absl::StatusOr<LayerErrorCurve> ExactMlaScheme::Curve(
    const SourceLayer& layer, const CandidateLoss* loss) {
  const LayerWeights& src = layer.kv;
  const at::Tensor wk = CompressedKey(layer);
  LayerErrorCurve curve;
  if (loss == nullptr) {
    const std::vector<double> e = MlaErrorCurve(wk, src.wv, layer.whitening);
    for (int64_t s = 1; s < static_cast<int64_t>(e.size()); ++s) {
      curve.sizes.push_back(s);
      curve.errors.push_back(e[s]);
    }
    return curve;
  }
  // A forward pass per size: a grid around the uniform latent, not every latent
  // (up to the rank of [W_K | W_V]).
  const int64_t top = wk.size(0) + src.wv.size(0);
  for (const int64_t s : CurveGrid(uniform_size(), 1, top, kCurveSteps)) {
    if (s == 0) continue;
    MlaFactors f = FactorizeMla(wk, src.wv, layer.whitening, s);
    LayerWeights candidate;
    candidate.kv_down = f.kv_down;
    candidate.k_up = f.k_up;
    candidate.v_up = f.v_up;
    candidate.bk = src.bk;
    candidate.bv = src.bv;
    ASSIGN_OR_RETURN(const double d, (*loss)(s, std::move(candidate)));
    curve.sizes.push_back(s);
    curve.errors.push_back(d);
  }
  return curve;
}

absl::StatusOr<LayerReport> ExactMlaScheme::ConvertLayer(
    const SourceLayer& layer, LayerWeights* l) {
  const int64_t size = LayerSize(layer.index);
  MlaFactors f = FactorizeMla(layer.kv.wk, layer.kv.wv, layer.whitening, size);
  l->wk = l->wv = at::Tensor();
  l->kv_down = f.kv_down;
  l->k_up = f.k_up;
  l->v_up = f.v_up;
  LayerReport row;
  row.layer = layer.index;
  row.k.rel_error = f.k_rel_error;
  row.v.rel_error = f.v_rel_error;
  row.size = size;
  return row;
}

std::unique_ptr<KvScheme> MakeExactMlaScheme(const SchemeSetup& setup) {
  if (setup.target.variant != KvVariant::kMla ||
      setup.options->rope_mode == RopeMode::kPartial) {
    return nullptr;
  }
  return std::make_unique<ExactMlaScheme>(setup);
}

}  // namespace lrkv
