// MLA, exact RoPE: K and V of every KV head rebuilt from one cached latent c =
// W_DKV x of d_c elements (the joint truncated SVD of [W_K | W_V], whitened
// under the activation metric); the runtime rebuilds keys per position, so RoPE
// is applied as in the source. Sized by the latent: its curve is the SVD's tail
// (or the measured loss).
#ifndef LRKV_SURGERY_SCHEMES_EXACT_MLA_SCHEME_H_
#define LRKV_SURGERY_SCHEMES_EXACT_MLA_SCHEME_H_

#include <memory>

#include "surgery/kv_scheme.h"

namespace lrkv {

class ExactMlaScheme : public KvScheme {
 public:
  explicit ExactMlaScheme(const SchemeSetup& setup);

  bool sized() const override { return true; }
  absl::StatusOr<LayerErrorCurve> Curve(const SourceLayer& layer,
                                        const CandidateLoss* loss) override;
  absl::StatusOr<LayerReport> ConvertLayer(const SourceLayer& layer,
                                           LayerWeights* out) override;

 protected:
  int64_t* SizeOf(KvConfig* c) const override { return &c->latent; }
  int64_t* SizeOf(ModelConfig* c) const override { return &c->kv.latent; }
  // The key weights the latent compresses [H_kv*d_h, d].
  virtual at::Tensor CompressedKey(const SourceLayer& layer) const;
};

// Null unless the target is MLA without decoupled RoPE.
std::unique_ptr<KvScheme> MakeExactMlaScheme(const SchemeSetup& setup);

}  // namespace lrkv

#endif  // LRKV_SURGERY_SCHEMES_EXACT_MLA_SCHEME_H_
