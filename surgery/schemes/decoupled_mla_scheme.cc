// MLA with decoupled RoPE (see decoupled_mla_scheme.h).
#include "surgery/schemes/decoupled_mla_scheme.h"

#include "surgery/baselines.h"
#include "surgery/decoupled_rope.h"
#include "surgery/latent_norm_fit.h"
#include "surgery/schemes/exact_mla_scheme.h"

namespace lrkv {
namespace {

class DecoupledMlaScheme final : public ExactMlaScheme {
 public:
  explicit DecoupledMlaScheme(const SchemeSetup& setup)
      : ExactMlaScheme(setup) {
    converted_.kv.latent_norm = options_.latent_norm;
  }

  // Its keys (d_h + d_rope) have no dense form to probe.
  bool probes_loss_densely() const override { return false; }

  absl::StatusOr<LayerReport> ConvertLayer(const SourceLayer& layer,
                                           LayerWeights* l) override {
    const LayerWeights& src = layer.kv;
    const int64_t size = LayerSize(layer.index);
    const at::Tensor bq = l->bq.defined() ? l->bq.to(at::kFloat) : at::Tensor();
    DecoupledRopeSplit split =
        SplitDecoupledRope(source_, layer.index, l->wq.to(at::kFloat), bq,
                           src.wk, src.bk, layer.whitening, kept_);
    MlaFactors f = FactorizeMla(split.wk_nope, src.wv, layer.whitening, size);
    l->wk = l->wv = at::Tensor();
    l->kv_down = f.kv_down;
    l->k_up = f.k_up;
    l->v_up = f.v_up;
    l->bk = split.bk_nope;
    l->k_rope = split.k_rope;
    l->bk_rope = split.bk_rope;
    l->q_rope = split.q_rope;
    l->bq_rope = split.bq_rope;
    LayerReport row;
    row.layer = layer.index;
    // The key's weight-space error: its rotated part is carried exactly (what
    // it loses is rotation, a change of function measured by the evaluation).
    const auto k_hat = at::matmul(f.k_up, f.kv_down) + (src.wk - split.wk_nope);
    row.k.rel_error = RelativeError(src.wk, k_hat, layer.whitening);
    row.v.rel_error = f.v_rel_error;
    row.size = size;
    row.shared_rope_energy = split.shared_rope_energy;
    row.kept_plane_energy = split.kept_plane_energy;
    if (options_.latent_norm) {
      const LatentNormFit fit = FitLatentNorm(
          f.kv_down, at::cat({f.k_up, f.v_up}, 0), layer.inputs,
          source_.post_norm ? at::Tensor() : layer.stored->attn_norm,
          source_.rms_norm_eps);
      const int64_t k_rows = f.k_up.size(0);
      l->kv_down = fit.kv_down;
      l->k_up = fit.up.slice(0, 0, k_rows).contiguous();
      l->v_up = fit.up.slice(0, k_rows).contiguous();
      l->kv_norm = fit.gamma;
      row.latent_norm_error = fit.rel_error;
      row.latent_norm_plain_error = fit.plain_rel_error;
      row.latent_norm_whitened = fit.whitened;
      row.latent_norm_refit = fit.refitted;
    }
    return row;
  }

 protected:
  // The latent compresses the key less its shared rotated part.
  at::Tensor CompressedKey(const SourceLayer& layer) const override {
    return SplitDecoupledRope(source_, layer.index,
                              layer.stored->wq.to(at::kFloat), at::Tensor(),
                              layer.kv.wk, at::Tensor(), layer.whitening, kept_)
        .wk_nope;
  }
};

}  // namespace

std::unique_ptr<KvScheme> MakeDecoupledMlaScheme(const SchemeSetup& setup) {
  if (setup.target.variant != KvVariant::kMla ||
      setup.options->rope_mode != RopeMode::kPartial) {
    return nullptr;
  }
  return std::make_unique<DecoupledMlaScheme>(setup);
}

}  // namespace lrkv
