// The source's own expanded attention (see expanded_scheme.h).
#include "surgery/schemes/expanded_scheme.h"

namespace lrkv {
namespace {

class ExpandedScheme final : public KvScheme {
 public:
  using KvScheme::KvScheme;

  absl::StatusOr<LayerReport> ConvertLayer(const SourceLayer& layer,
                                           LayerWeights*) override {
    LayerReport row;
    row.layer = layer.index;
    return row;
  }
};

}  // namespace

std::unique_ptr<KvScheme> MakeExpandedScheme(const SchemeSetup& setup) {
  if (setup.target.variant != KvVariant::kMha) return nullptr;
  return std::make_unique<ExpandedScheme>(setup);
}

}  // namespace lrkv
