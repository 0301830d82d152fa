// The K/V scheme interface's shared parts and the registry of schemes (see
// kv_scheme.h).
#include "surgery/kv_scheme.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "surgery/schemes/decoupled_mla_scheme.h"
#include "surgery/schemes/exact_mla_scheme.h"
#include "surgery/schemes/expanded_scheme.h"
#include "surgery/schemes/lrkv_scheme.h"
#include "surgery/schemes/pooled_scheme.h"
#include "surgery/schemes/shared_plane_scheme.h"

namespace lrkv {
namespace {

// Each scheme's factory answers null for a target that is not its own (variant,
// RoPE mode). One line per scheme.
using SchemeFactory = std::unique_ptr<KvScheme> (*)(const SchemeSetup&);
constexpr SchemeFactory kSchemeRegistry[] = {
    MakeExpandedScheme,      //
    MakePooledScheme,        //
    MakeExactMlaScheme,      //
    MakeDecoupledMlaScheme,  //
    MakeLrkvScheme,          //
    MakeSharedPlaneScheme,   //
};

}  // namespace

KvScheme::KvScheme(const SchemeSetup& setup)
    : source_(*setup.source),
      options_(*setup.options),
      resolved_(setup.target),
      target_(setup.target),
      converted_(*setup.source),
      kept_(setup.rope_planes_kept) {}

int64_t* KvScheme::SizeOf(KvConfig*) const { return nullptr; }
int64_t* KvScheme::SizeOf(ModelConfig*) const { return nullptr; }

int64_t KvScheme::uniform_size() const {
  KvConfig c = resolved_;
  const int64_t* size = SizeOf(&c);
  return size != nullptr ? *size : 0;
}

int64_t KvScheme::CacheCost(int64_t size) const {
  KvConfig c = resolved_;
  if (int64_t* field = SizeOf(&c)) *field = size;
  return CacheElementsPerToken(ShapeOf(source_), c);
}

int64_t KvScheme::LayerSize(int64_t layer) const {
  KvConfig c = target_.AtLayer(layer);
  const int64_t* size = SizeOf(&c);
  return size != nullptr ? *size : 0;
}

void KvScheme::SetLayerSizes(const std::vector<int64_t>& sizes) {
  int64_t* target_size = SizeOf(&target_);
  if (target_size == nullptr || sizes.empty()) return;
  const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  target_.layer_sizes = sizes;
  *target_size = largest;
  // A layout that records per-layer sizes (LRKV, MLA) keeps them in the model's
  // config.
  if (int64_t* config_size = SizeOf(&converted_)) {
    converted_.kv.layer_sizes = sizes;
    *config_size = largest;
  }
}

absl::StatusOr<LayerErrorCurve> KvScheme::Curve(const SourceLayer& layer,
                                                const CandidateLoss*) {
  return absl::InvalidArgumentError(
      absl::StrCat(target_.ToString(),
                   " has one shape for every layer: no per-layer sizes (layer ",
                   layer.index, ")"));
}

absl::StatusOr<std::unique_ptr<KvScheme>> MakeKvScheme(
    const ModelConfig& config, const ConversionOptions& options) {
  SchemeSetup setup;
  setup.source = &config;
  setup.options = &options;
  ASSIGN_OR_RETURN(setup.target, ResolveTarget(config, options));
  setup.rope_planes_kept = RopePlanesKept(config, options);
  for (const SchemeFactory make : kSchemeRegistry) {
    if (std::unique_ptr<KvScheme> scheme = make(setup)) return scheme;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no K/V scheme converts to ", setup.target.ToString(),
                   " with RoPE mode ", RopeModeName(options.rope_mode)));
}

}  // namespace lrkv
