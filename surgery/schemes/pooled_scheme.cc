// GQA and MQA by pooling (see pooled_scheme.h).
#include "surgery/schemes/pooled_scheme.h"

#include "surgery/baselines.h"

namespace lrkv {
namespace {

// Per source KV head: ‖M(W_h − Ŵ_{j(h)})‖/‖M W_h‖ where j(h) is the pooled head
// that h's first query head uses.
ProjectionReport PooledReport(const ModelConfig& c, const at::Tensor& src,
                              const at::Tensor& pooled, int64_t n_kv,
                              const at::Tensor& whitening) {
  ProjectionReport p;
  const int64_t dh = c.head_dim, g_src = c.num_heads / c.num_kv_heads,
                g_dst = c.num_heads / n_kv;
  std::vector<at::Tensor> approx;
  for (int64_t h = 0; h < c.num_kv_heads; ++h) {
    const int64_t j = h * g_src / g_dst;
    const auto wh = src.narrow(0, h * dh, dh),
               ph = pooled.narrow(0, j * dh, dh);
    p.head_rel_error.push_back(RelativeError(wh, ph, whitening));
    approx.push_back(ph);
  }
  p.rel_error = RelativeError(src, at::cat(approx, 0), whitening);
  return p;
}

class PooledScheme final : public KvScheme {
 public:
  explicit PooledScheme(const SchemeSetup& setup) : KvScheme(setup) {
    converted_.num_kv_heads =
        target_.variant == KvVariant::kMqa ? 1 : target_.kv_heads;
  }

  absl::StatusOr<LayerReport> ConvertLayer(const SourceLayer& layer,
                                           LayerWeights* l) override {
    const LayerWeights& src = layer.kv;
    const int64_t n = converted_.num_kv_heads;
    l->wk = PoolKvHeads(source_, src.wk, n);
    l->wv = PoolKvHeads(source_, src.wv, n);
    if (src.bk.defined()) {
      l->bk = PoolKvHeads(source_, src.bk, n);
      l->bv = PoolKvHeads(source_, src.bv, n);
    }
    // OLMo-2's key norm has weights per KV head: pooled alike.
    if (source_.qk_norm_over_heads)
      l->k_norm = PoolKvHeads(source_, src.k_norm, n);
    LayerReport row;
    row.layer = layer.index;
    row.k = PooledReport(source_, src.wk, l->wk, n, layer.whitening);
    row.v = PooledReport(source_, src.wv, l->wv, n, layer.whitening);
    return row;
  }
};

}  // namespace

std::unique_ptr<KvScheme> MakePooledScheme(const SchemeSetup& setup) {
  if (setup.target.variant != KvVariant::kGqa &&
      setup.target.variant != KvVariant::kMqa) {
    return nullptr;
  }
  return std::make_unique<PooledScheme>(setup);
}

}  // namespace lrkv
