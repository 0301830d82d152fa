// LRKV: each KV head's K (and V) projection is one shared projection S plus a
// rank-r residual U_h B_hᵀ (docs/design.md, "Surgery"), solved by the
// alternating solver. The RoPE mode sets where the key's residual may live:
// anywhere
// (`reconstruct`, keys rebuilt per position), on r/2 whole rotation planes
// (`plane`), or off the planes a `partial` conversion keeps rotated. Sized by
// the rank: the allocation's curve is a grid of converged decompositions around
// the uniform rank, warm-started from each other and kept to start the final
// pass from.
#ifndef LRKV_SURGERY_SCHEMES_LRKV_SCHEME_H_
#define LRKV_SURGERY_SCHEMES_LRKV_SCHEME_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "surgery/kv_scheme.h"
#include "surgery/lrkv_decomposition.h"

namespace lrkv {

class LrkvScheme : public KvScheme {
 public:
  explicit LrkvScheme(const SchemeSetup& setup);

  bool sized() const override { return true; }
  absl::StatusOr<LayerErrorCurve> Curve(const SourceLayer& layer,
                                        const CandidateLoss* loss) override;
  absl::StatusOr<LayerReport> ConvertLayer(const SourceLayer& layer,
                                           LayerWeights* out) override;

 protected:
  using Planes = std::vector<std::pair<int64_t, int64_t>>;
  // K and V decomposed side by side.
  using KvDecomposition = std::pair<LrkvDecomposition, LrkvDecomposition>;
  // A warm start: the shared projections S of K and V.
  using SharedKv = std::pair<at::Tensor, at::Tensor>;

  int64_t* SizeOf(KvConfig* c) const override { return &c->rank; }
  int64_t* SizeOf(ModelConfig* c) const override { return &c->kv.rank; }

  // The solver's options for layer `layer`'s key (its residual's support in
  // this RoPE mode; a NoPE layer's planes are all position-free), with the
  // head's planes.
  LrkvDecompositionOptions KeyOptions(int64_t layer, Planes* planes) const;
  // The solver's options for the values (free support).
  LrkvDecompositionOptions ValueOptions(int64_t rank) const;
  // K and V at `rank`, one thread each (the solver's operations are too small
  // to use two threads well: measured, one thread per step is as fast as two).
  absl::StatusOr<KvDecomposition> DecomposeKv(
      const SourceLayer& layer, const LrkvDecompositionOptions& key,
      int64_t rank, const SharedKv* warm) const;
  // The factors at rank r into `l`, with the source's biases split into shared
  // and per-head parts; the dense K/V cleared.
  void SetFactors(const KvDecomposition& kv, int64_t r, const Planes& planes,
                  const LrkvDecompositionOptions& key, const LayerWeights& src,
                  LayerWeights* l) const;

  const int64_t hkv_, dh_;
  // Per layer, from the curves pass: the uniform-rank decomposition (reused by
  // the final pass) and S at every rank measured (the final pass starts from
  // the S its plan was rated with: the problem is not convex, and a start from
  // the uniform S can end elsewhere; on stories260K, calibration loss 2.71
  // vs 2.33).
  std::vector<std::optional<KvDecomposition>> uniform_dec_;
  std::vector<std::map<int64_t, SharedKv>> curve_shared_;
};

// Null unless the target is LRKV in reconstruct, plane or partial RoPE mode.
std::unique_ptr<KvScheme> MakeLrkvScheme(const SchemeSetup& setup);

}  // namespace lrkv

#endif  // LRKV_SURGERY_SCHEMES_LRKV_SCHEME_H_
