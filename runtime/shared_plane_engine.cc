// The shared-plane LRKV engine (surgery/shared_plane.h). Cache per token per layer:
// the shared key (rotated), the H_kv·r/2 shared K latent planes (each rotated at write
// time with its RoPE plane's frequency), the shared value and each KV head's V latents:
// 2(d_h + H_kv·r) elements, LRKV's own. Attention by associativity:
//   score_h(t) = P_p q̂_h · P_t k_s,t + (B_gᵀ P_p q̂_h) · P'_t z_t
// exact because B_g maps each shared pair into its plane through a complex factor,
// which commutes with the rotation (P_t B_g = B_g P'_t).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/layers.h"
#include "base/status_macros.h"
#include "runtime/engines.h"

namespace lrkv {
namespace {

// The RoPE plane each shared latent pair j of K's up-projection [H_kv, d_h, 2m] feeds,
// [1, m]; InvalidArgument unless every pair reads one plane's coordinates through
// blocks [[a, −b], [b, a]].
absl::StatusOr<at::Tensor> SharedPlaneStructure(const at::Tensor& up, const Rope& rope,
                                                int64_t layer) {
  const int64_t hkv = up.size(0), dh = up.size(1), m = up.size(2) / 2;
  const at::Tensor u = up.to(at::kDouble);
  auto acc = u.accessor<double, 3>();
  auto planes = at::zeros({1, m}, at::kLong);
  for (int64_t j = 0; j < m; ++j) {
    int64_t found = -1;
    for (int64_t p = 0; p < rope.head_planes() && found < 0; ++p) {
      const auto [a, b] = rope.PlaneCoordinates(p);
      bool outside_zero = true, complex_form = true, any = false;
      for (int64_t h = 0; h < hkv; ++h) {
        for (int64_t c = 0; c < dh; ++c) {
          if (c == a || c == b) continue;
          outside_zero = outside_zero && acc[h][c][2 * j] == 0 && acc[h][c][2 * j + 1] == 0;
        }
        complex_form = complex_form && acc[h][a][2 * j] == acc[h][b][2 * j + 1] &&
                       acc[h][a][2 * j + 1] == -acc[h][b][2 * j];
        any = any || acc[h][a][2 * j] != 0 || acc[h][b][2 * j] != 0;
      }
      if (outside_zero && complex_form && any) found = p;
    }
    if (found < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", layer, ": K latent pair ", j, " does not read one RoPE plane through a "
          "complex factor (convert with --rope-mode shared-plane)"));
    }
    planes[0][j] = found;
  }
  return planes;
}

class SharedPlaneEngine : public DecodeEngine {
 public:
  SharedPlaneEngine(const ModelConfig& config, const LlamaWeights& weights,
                    const EngineOptions& options)
      : DecodeEngine(config, weights, DecodeMode::kSharedPlane, options) {}

  absl::Status Init() {
    if (config_.kv.rope_mode != RopeMode::kSharedPlane) {
      return absl::InvalidArgumentError(
          "shared-plane mode needs a model converted with --rope-mode shared-plane");
    }
    const int64_t dh = config_.head_dim, hkv = config_.num_kv_heads;
    for (size_t i = 0; i < weights_.layers.size(); ++i) {
      const auto layer = static_cast<int64_t>(i);
      const LayerWeights& l = weights_.layers[i];
      Layer L;
      ASSIGN_OR_RETURN(L.planes, SharedPlaneStructure(l.k_lr.up, rope(layer), layer));
      if (options_.fault == DecodeFault::kWrongPlane) {
        L.planes = (L.planes + 1).clamp_max(rope(layer).head_planes() - 1);
      }
      const int64_t r = config_.kv.RankAt(layer);
      L.ks = NewCache({dh});
      L.z = NewCache({hkv * r});
      L.vs = NewCache({dh});
      L.zv = NewCache({hkv * r});
      layers_.push_back(std::move(L));
    }
    return absl::OkStatus();
  }

 protected:
  void Append(int64_t layer, const at::Tensor& x, const RowPositions& at) override {
    const LayerWeights& l = weights_.layers[layer];
    Layer& L = layers_[layer];
    const int64_t rows = x.size(0), dh = config_.head_dim;
    const auto ks = SlotLinear(x, l.k_lr.shared, l.k_lr.shared_bias).view({rows, 1, dh});
    Write(L.ks, at, RotateAt(layer, ks, at).view({rows, dh}));
    const auto z = SlotLinear(x, l.k_lr.down);  // [R, 2m]
    Write(L.z, at, RotatePairsAt(layer, z.unsqueeze(1), L.planes, at).squeeze(1));
    Write(L.vs, at, SlotLinear(x, l.v_lr.shared, l.v_lr.shared_bias));
    Write(L.zv, at, SlotLinear(x, l.v_lr.down));
  }

  at::Tensor Attend(int64_t layer, const at::Tensor& q, int64_t pos) override {
    const LayerWeights& l = weights_.layers[layer];
    Layer& L = layers_[layer];
    const int64_t n = pos + 1, b = q.size(0), hkv = config_.num_kv_heads,
                  dh = config_.head_dim, r = config_.kv.RankAt(layer);
    // The cache reads and the factors are in the compute dtype already (Read, ForCompute).
    const auto qr = Grouped(RotateAt(layer, q, pos));  // [B, Hkv, g, dh]
    const auto ks = Read(L.ks, n), z = Read(L.z, n), vs = Read(L.vs, n);
    const auto zv = Read(L.zv, n).view({b, n, hkv, r});
    const auto &k_up = l.k_lr.up, &v_up = l.v_lr.up;
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    at::Tensor probs;
    if (options_.materialize) {
      // Per-head keys and values rebuilt from this engine's own cache.
      const auto k = ks.unsqueeze(2) + at::einsum("blr,hdr->blhd", {z, k_up});
      probs = at::softmax(at::einsum("bhgd,blhd->bhgl", {qr, k}) * scale, -1);
    } else {
      const auto qz = at::einsum("bhgd,hdr->bhgr", {qr, k_up});  // B_gᵀ q, [B, Hkv, g, 2m]
      probs = at::softmax((at::einsum("bhgd,bld->bhgl", {qr, ks}) +
                           at::einsum("bhgr,blr->bhgl", {qz, z})) *
                              scale,
                          -1);
    }
    auto out = at::einsum("bhgl,bld->bhgd", {probs, vs}) +
               at::einsum("bhgr,hdr->bhgd",
                          {at::einsum("bhgl,blhr->bhgr", {probs, zv}), v_up});
    if (l.v_lr.head_bias.defined()) {
      out = out + l.v_lr.head_bias.view({1, hkv, 1, dh});
    }
    return out.reshape({b, config_.num_heads, dh});
  }

  std::vector<at::Tensor*> CacheTensors() override {
    std::vector<at::Tensor*> out;
    for (auto& L : layers_) {
      for (at::Tensor* t : {&L.ks, &L.z, &L.vs, &L.zv}) out.push_back(t);
    }
    return out;
  }

 private:
  struct Layer {
    at::Tensor planes;  // [1, m]: the RoPE plane of each shared K latent pair
    at::Tensor ks, z, vs, zv;
  };
  std::vector<Layer> layers_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeEngine>> MakeSharedPlaneEngine(
    const ModelConfig& config, const LlamaWeights& weights, const EngineOptions& options) {
  auto engine = std::make_unique<SharedPlaneEngine>(config, weights, options);
  if (auto st = engine->Init(); !st.ok()) return st;
  return std::unique_ptr<DecodeEngine>(std::move(engine));
}

}  // namespace lrkv
