// The factored LRKV engine. Cache per token per layer: the shared key (γ-scaled
// and rotated) and value, each KV head's K and V latents, and σ = 1/rms(k) per
// KV head when the model has QK-norm; 2(d_h + H_kv·r) (+ H_kv) elements.
// Attention by associativity (docs/design.md, "The math that must hold"):
//   score_h(t) = σ_t [ P_p q̂ · P_t(γ⊙k_s,t) + residual_h(t) ]
//   out_h      = a V_s + (a Z_hⱽ) B_hⱽᵀ + δ_hⱽ
// where residual_h depends on the RoPE mode (see decode_engine.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cache_layout.h"
#include "kernels/decode_attention.h"
#include "runtime/engines.h"
#include "runtime/layers.h"
#include "runtime/lrkv_factors.h"

namespace lrkv {
namespace {

class LrkvEngine : public DecodeEngine {
  struct Layer;  // defined with the other members below

 public:
  LrkvEngine(const ModelConfig& config, const LlamaWeights& weights,
             DecodeMode mode, const EngineOptions& options)
      : DecodeEngine(config, weights, mode, options) {}

  absl::Status Init() {
    const int64_t hkv = config_.num_kv_heads, dh = config_.head_dim;
    if (mode_ == DecodeMode::kNaive && config_.rope_dim == 0) {
      return absl::InvalidArgumentError(
          "naive mode is a RoPE control; the model has no RoPE");
    }
    if (mode_ == DecodeMode::kPartial &&
        config_.kv.rope_mode != RopeMode::kPartial) {
      return absl::InvalidArgumentError(
          "partial mode needs a model converted with --rope-mode partial");
    }
    // Plane mode feeds the factored kernel (fp32 arithmetic, fp32 or bf16
    // storage); its fused implementation reads the tiled layout, which
    // allocates whole tiles of positions. float64 arithmetic (the error model's
    // twins, verify/equivalence.h) goes through ATen.
    const bool kernel_types = compute_dtype() == at::kFloat;
    // Per-head key-norm weights (OLMo-2) need the two-part shared key below,
    // which the kernel (one d_h-wide shared key) does not read.
    split_ = config_.qk_norm && config_.qk_norm_over_heads;
    apply_sigma_ = config_.qk_norm && options_.fault != DecodeFault::kDropSigma;
    // The shared and residual parts of a score (and of an output) are summed
    // after they are computed, and after healing they can be large and cancel.
    // With fp32 storage, the proof mode, that sum is carried in float64 so that
    // the only roundings left are the stored values'; bf16 storage computes in
    // fp32. The error model's float64 twins compute in float64 too.
    sum_dtype_ = compute_dtype() == at::kDouble ||
                         (options_.cache_dtype == at::kFloat && options_.float64_sums)
                     ? at::kDouble
                     : at::kFloat;
    kernel_ = mode_ == DecodeMode::kPlane && !options_.materialize &&
              options_.kernels && kernel_types && !split_;
    // A block-quantized cache keeps rows (the tiled layout has no blocks).
    tiled_ = mode_ == DecodeMode::kPlane && kernel_types && !split_ &&
             !options_.cache_blocks &&
             (options_.factored_layout == FactoredCacheLayout::kTiles ||
              (options_.factored_layout == FactoredCacheLayout::kAuto &&
               kernels::TiledKernelAvailable()));
    if (tiled_) AlignCapacity(kernels::kCacheTile);
    for (size_t i = 0; i < weights_.layers.size(); ++i) {
      const LayerWeights& l = weights_.layers[i];
      const Rope& layer_rope = rope(static_cast<int64_t>(i));
      const int64_t r = config_.kv.RankAt(static_cast<int64_t>(i));
      Layer layer;
      layer.k = FactorsOf(l.k_lr, hkv, dh);
      layer.v = FactorsOf(l.v_lr, hkv, dh);
      // γ of the key norm per KV head [Hkv, dh] (ones without QK-norm).
      layer.gamma = !config_.qk_norm ? at::ones({hkv, dh}, at::TensorOptions().dtype(compute_dtype()))
                    : split_         ? l.k_norm.view({hkv, dh})
                                     : l.k_norm.unsqueeze(0).expand({hkv, dh}).contiguous();
      if (split_) SplitGamma(layer_rope, &layer);
      if (mode_ == DecodeMode::kPlane) {
        auto st = PlaneStructure(layer.k.up, layer_rope, static_cast<int64_t>(i),
                                 &layer.coords, &layer.planes);
        if (!st.ok()) return st;
        if (options_.fault == DecodeFault::kWrongPlane && layer_rope.planes() > 1) {
          layer.planes = (layer.planes + 1) % layer_rope.planes();
        }
        // Folded into the latent at write time: the bias on the selected
        // coordinates and γ. A per-head key bias elsewhere has no latent to
        // ride on (a reconstruct-mode conversion keeps whole per-head deltas),
        // so plane decoding could not represent it.
        layer.latent_bias = layer.k.delta.gather(1, layer.coords);
        const auto outside = layer.k.delta.clone().scatter_(1, layer.coords, 0.0);
        if (outside.abs().max().item<double>() != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "layer ", i, ": the per-head K bias deltas lie outside the latent's "
              "RoPE planes (rank ", r, "), which plane decoding cannot represent "
              "(convert with --rope-mode plane, which keeps them on the planes)"));
        }
        layer.latent_gamma = layer.gamma.gather(1, layer.coords);
      } else if (mode_ == DecodeMode::kNaive) {
        layer.planes = at::arange(r / 2, at::kLong)
                           .clamp_max(std::max<int64_t>(layer_rope.planes() - 1, 0))
                           .unsqueeze(0)
                           .expand({hkv, r / 2})
                           .contiguous();
      } else if (mode_ == DecodeMode::kPartial) {
        for (int64_t p = 0; p < layer_rope.planes(); ++p) {
          if (!layer_rope.PlaneRotates(p)) continue;
          const auto [a, b] = layer_rope.PlaneCoordinates(p);
          for (int64_t c : {a, b}) {
            // (count_nonzero: a rank-0 residual has no columns to take a max over)
            if (layer.k.up.select(1, c).count_nonzero().item<int64_t>() != 0 ||
                layer.k.delta.select(1, c).count_nonzero().item<int64_t>() != 0) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "layer ", i, ": the K residual touches rotated coordinate ",
                  c, ", so partial-mode decoding would not be exact"));
            }
          }
        }
      }
      layer.ks = NewSegment(true, {split_ ? 2 * dh : dh});
      layer.vs = NewSegment(false, {dh});
      layer.zk = NewSegment(true, {hkv, r});
      layer.zv = NewSegment(false, {hkv, r});
      // σ: one per KV head and token, or one per token over all heads.
      if (config_.qk_norm)
        layer.sigma = NewScaleCache({config_.qk_norm_over_heads ? 1 : hkv});
      layers_.push_back(std::move(layer));
    }
    return absl::OkStatus();
  }

 protected:
  void Append(int64_t index, const at::Tensor& x, const RowPositions& at) override {
    WriteEntries(
        index, at,
        EntriesOf(
            index, x,
            [&](const at::Tensor& t) { return RotateAt(index, t, at); },
            [&](const at::Tensor& z, const at::Tensor& planes) {
              return RotatePairsAt(index, z, planes, at);
            }));
  }

  // Every row's entries computed at once (row i rotated at positions[i]), each
  // written to its own engine's cache.
  bool AppendTogether(int64_t index, const std::vector<DecodeEngine*>& engines,
                      const at::Tensor& x,
                      const std::vector<int64_t>& positions) override {
    std::vector<LrkvEngine*> peers;
    if (!PeersOf(engines, &peers)) return false;
    const Entries all = EntriesOf(
        index, x,
        [&](const at::Tensor& t) { return RotateEachAt(index, t, positions); },
        [&](const at::Tensor& z, const at::Tensor& planes) {
          return RotatePairsEachAt(index, z, planes, positions);
        });
    for (size_t i = 0; i < peers.size(); ++i) {
      const auto row = static_cast<int64_t>(i);
      auto one = [&](const at::Tensor& t) {
        return t.defined() ? t.narrow(0, row, 1) : t;
      };
      peers[i]->WriteEntries(
          index, {positions[i], false},
          {one(all.sigma), one(all.ks), one(all.zk), one(all.vs), one(all.zv)});
    }
    return true;
  }

  at::Tensor Attend(int64_t index, const at::Tensor& q, int64_t pos) override {
    if (options_.materialize) return AttendMaterialized(index, q, pos);
    if (kernel_) return AttendWithKernel(index, q, pos);
    Layer& L = layers_[index];
    const int64_t n = pos + 1, dh = config_.head_dim;
    auto A = [acc = sum_dtype_](const at::Tensor& t) { return t.to(acc); };
    const auto qg = A(Grouped(q));                 // q̂ [B, Hkv, g, dh]
    const auto qr = A(Grouped(RotateAt(index, q, pos)));  // P_p q̂
    const auto z = A(ReadSegment(L.zk, n));        // [B, L, Hkv, r]
    // The shared key's score; with split weights [ḡ_h ⊙ P_p q̂ ; δ_h ⊙ P_p q̂]
    // against [P_t k_s ; P_t J k_s].
    const auto q_shared =
        split_ ? at::cat({qr * A(L.gbar).unsqueeze(1), qr * A(L.gdelta).unsqueeze(1)}, -1)
               : qr;
    auto scores = at::einsum("bhgd,bld->bhgl", {q_shared, A(ReadSegment(L.ks, n))});
    switch (mode_) {
      case DecodeMode::kReconstruct: {
        // Rebuild γ⊙(B_h z_t + δ_h) at every position and rotate it:
        // O(L·r·d_h).
        auto res =
            (at::einsum("blhr,hdr->blhd", {z, A(L.k.up)}) + A(L.k.delta)) *
            A(L.gamma);
        res = rope(index).Rotate(res, at::arange(n, at::kLong));
        scores = scores + at::einsum("bhgd,blhd->bhgl", {qr, res});
        break;
      }
      case DecodeMode::kPlane: {
        // The rotated query's coordinates on each head's planes meet the
        // latents rotated at write time: O(L·r).
        const auto idx =
            L.coords.view({1, L.coords.size(0), 1, L.coords.size(1)})
                .expand({qr.size(0), -1, qr.size(2), -1});
        scores = scores + at::einsum("bhgr,blhr->bhgl", {qr.gather(3, idx), z});
        break;
      }
      case DecodeMode::kPartial: {
        // The residual lives on position-free coordinates: (q̂⊙γ) B_h against
        // raw latents, plus the per-head bias term.
        const auto qgam = qg * A(L.gamma).unsqueeze(1);
        auto w = at::einsum("bhgd,hdr->bhgr", {qgam, A(L.k.up)});
        scores = scores + at::einsum("bhgr,blhr->bhgl", {w, z}) +
                 at::einsum("bhgd,hd->bhg", {qgam, A(L.k.delta)}).unsqueeze(-1);
        break;
      }
      case DecodeMode::kNaive: {
        // The paper's shortcut: (P_p q̂ ⊙ γ) B_h against latents rotated in
        // r-space.
        auto w = at::einsum("bhgd,hdr->bhgr", {qr * A(L.gamma).unsqueeze(1), A(L.k.up)});
        scores = scores + at::einsum("bhgr,blhr->bhgl", {w, z});
        break;
      }
      case DecodeMode::kExpanded:
        break;
    }
    if (apply_sigma_) {
      scores = scores * A(Read(L.sigma, n)).permute({0, 2, 1}).unsqueeze(2);
    }
    auto probs = at::softmax(scores / std::sqrt(static_cast<double>(dh)), -1);
    auto out = at::einsum("bhgl,bld->bhgd", {probs, A(ReadSegment(L.vs, n))});
    auto pooled =
        at::einsum("bhgl,blhr->bhgr", {probs, A(ReadSegment(L.zv, n))});
    out = out + at::einsum("bhgr,hdr->bhgd", {pooled, A(L.v.up)}) +
          A(L.v.delta).unsqueeze(1);
    return out.reshape(q.sizes()).to(q.scalar_type());
  }

  // A prefill's rows attend causally in one product per chunk of rows, through the
  // ATen formulation of Attend above (the same scores, σ, softmax and sums per row,
  // over its own positions only): the cache is read once per chunk and reconstruct
  // mode rotates its rebuilt residual keys once for the whole span, not once per row
  // (which made its prefill O(L²) in RoPE work).
  at::Tensor AttendRows(int64_t index, const at::Tensor& q, const RowPositions& at) override {
    if (!at.consecutive || q.size(0) == 1 || options_.materialize) {
      return DecodeEngine::AttendRows(index, q, at);
    }
    Layer& L = layers_[index];
    const int64_t rows = q.size(0), n = at.pos + rows, dh = config_.head_dim,
                  hkv = config_.num_kv_heads;
    auto A = [acc = sum_dtype_](const at::Tensor& t) { return t.to(acc); };
    const auto z = A(ReadSegment(L.zk, n))[0];    // [L, Hkv, r]
    const auto ks = A(ReadSegment(L.ks, n))[0];   // [L, dh] (split: [L, 2 dh])
    const auto vs = A(ReadSegment(L.vs, n))[0];   // [L, dh]
    const auto zv = A(ReadSegment(L.zv, n))[0];   // [L, Hkv, r]
    at::Tensor res;
    if (mode_ == DecodeMode::kReconstruct) {
      res = (at::einsum("lhr,hdr->lhd", {z, A(L.k.up)}) + A(L.k.delta)) * A(L.gamma);
      res = rope(index).Rotate(res.unsqueeze(0), at::arange(n, at::kLong)).squeeze(0);
    }
    at::Tensor sigma;  // [1, Hkv or 1, 1, L]
    if (apply_sigma_) sigma = A(Read(L.sigma, n))[0].t().unsqueeze(0).unsqueeze(2);
    const auto qg_all = A(Grouped(q));                        // [T, Hkv, g, dh]
    const auto qr_all = A(Grouped(RotateAt(index, q, at)));  // P_t q̂ per row
    const int64_t chunk = PrefillRowChunk(n);
    std::vector<at::Tensor> parts;
    for (int64_t t0 = 0; t0 < rows; t0 += chunk) {
      const int64_t m = std::min(chunk, rows - t0);
      const auto qg = qg_all.narrow(0, t0, m), qr = qr_all.narrow(0, t0, m);
      const auto q_shared =
          split_ ? at::cat({qr * A(L.gbar).unsqueeze(1), qr * A(L.gdelta).unsqueeze(1)}, -1)
                 : qr;
      auto scores = at::einsum("thgd,ld->thgl", {q_shared, ks});
      switch (mode_) {
        case DecodeMode::kReconstruct:
          scores = scores + at::einsum("thgd,lhd->thgl", {qr, res});
          break;
        case DecodeMode::kPlane: {
          const auto idx = L.coords.view({1, hkv, 1, L.coords.size(1)})
                               .expand({m, -1, qr.size(2), -1});
          scores = scores + at::einsum("thgr,lhr->thgl", {qr.gather(3, idx), z});
          break;
        }
        case DecodeMode::kPartial: {
          const auto qgam = qg * A(L.gamma).unsqueeze(1);
          const auto w = at::einsum("thgd,hdr->thgr", {qgam, A(L.k.up)});
          scores = scores + at::einsum("thgr,lhr->thgl", {w, z}) +
                   at::einsum("thgd,hd->thg", {qgam, A(L.k.delta)}).unsqueeze(-1);
          break;
        }
        case DecodeMode::kNaive: {
          const auto w =
              at::einsum("thgd,hdr->thgr", {qr * A(L.gamma).unsqueeze(1), A(L.k.up)});
          scores = scores + at::einsum("thgr,lhr->thgl", {w, z});
          break;
        }
        case DecodeMode::kExpanded:
          break;
      }
      if (sigma.defined()) scores = scores * sigma;
      scores = scores.masked_fill(FuturePositions(at.pos + t0, m, n).view({m, 1, 1, n}),
                                  -std::numeric_limits<double>::infinity());
      const auto probs = at::softmax(scores / std::sqrt(static_cast<double>(dh)), -1);
      auto out = at::einsum("thgl,ld->thgd", {probs, vs});
      const auto pooled = at::einsum("thgl,lhr->thgr", {probs, zv});
      out = out + at::einsum("thgr,hdr->thgd", {pooled, A(L.v.up)}) + A(L.v.delta).unsqueeze(1);
      parts.push_back(out);
    }
    return at::cat(parts, 0).reshape(q.sizes()).to(q.scalar_type());
  }

  // Plane mode through the fused CPU kernel (kernels/): the shared key and
  // value are read once per position for all heads, the latents meet the
  // rotated query's plane coordinates; the kernel returns a·V_s and a·Z_V, and
  // B_hⱽ is applied here.
  at::Tensor AttendWithKernel(int64_t index, const at::Tensor& q, int64_t pos) {
    const auto qr = RotateAt(index, q, pos).contiguous();  // [B, H, dh]
    KernelRows rows = KernelRowsOf(index, qr);
    RunKernel(index, rows, 0, q.size(0), pos + 1);
    return KernelResult(index, rows).reshape(q.sizes());
  }

  // Plane mode through the kernel for every engine's one new row: the queries'
  // rotation and plane coordinates and the values' up-projection for all rows
  // at once, the kernel for each sequence over its own cache.
  at::Tensor AttendTogether(int64_t index,
                            const std::vector<DecodeEngine*>& engines,
                            const at::Tensor& q,
                            const std::vector<int64_t>& positions) override {
    std::vector<LrkvEngine*> peers;
    if (!kernel_ || !PeersOf(engines, &peers)) return {};
    const auto qr = RotateEachAt(index, q, positions).contiguous();
    KernelRows rows = KernelRowsOf(index, qr);
    for (size_t i = 0; i < peers.size(); ++i) {
      peers[i]->RunKernel(index, rows, static_cast<int64_t>(i), 1,
                          positions[i] + 1);
    }
    return KernelResult(index, rows).reshape(q.sizes());
  }

  // The kernel's inputs and outputs for rotated queries qr [N, H, dh]: their
  // coordinates on each head's latent planes, and the outputs a·V_s, a·Z_V.
  struct KernelRows {
    at::Tensor qr, q_sel, out, out_latent;
  };
  KernelRows KernelRowsOf(int64_t index, const at::Tensor& qr) const {
    const Layer& L = layers_[index];
    const int64_t n = qr.size(0), h = config_.num_heads,
                  hkv = config_.num_kv_heads, dh = config_.head_dim,
                  r = config_.kv.RankAt(index);
    at::Tensor q_sel;
    if (FloatLoopsServe({qr})) {
      q_sel = QueryPlaneCoordinates(qr, L.coords);
    } else {
      const auto qg = Grouped(qr);
      const auto idx = L.coords.view({1, hkv, 1, L.coords.size(1)})
                           .expand({n, -1, qg.size(2), -1});
      q_sel = qg.gather(3, idx).reshape({n, h, r}).contiguous();
    }
    return {qr, q_sel, at::empty({n, h, dh}, at::kFloat),
            at::empty({n, h, r}, at::kFloat)};
  }

  // kernels::FactoredDecode of `batch` rows of `rows` from `row` over this
  // engine's cache of `length` positions.
  void RunKernel(int64_t index, KernelRows& rows, int64_t row, int64_t batch,
                 int64_t length) {
    Layer& L = layers_[index];
    const int64_t h = config_.num_heads, dh = config_.head_dim,
                  r = config_.kv.RankAt(index);
    at::Tensor sigma;
    if (apply_sigma_) {
      // One sequence reads only its first `length` rows of σ.
      sigma = (options_.batch == 1 ? L.sigma.narrow(1, 0, length) : L.sigma)
                  .to(at::kFloat)
                  .contiguous();
    }
    kernels::FactoredDecodeParams p;
    p.batch = batch;
    p.heads = h;
    p.kv_heads = config_.num_kv_heads;
    p.dim = dh;
    p.rank = r;
    p.length = length;
    p.capacity = capacity();
    p.dtype = KernelCacheDType();
    p.layout =
        tiled_ ? kernels::CacheLayout::kTiles : kernels::CacheLayout::kRows;
    p.k = {L.ks.data.data_ptr(), L.ks.stride};
    p.v = {L.vs.data.data_ptr(), L.vs.stride};
    p.zk = {L.zk.data.data_ptr(), L.zk.stride};
    p.zv = {L.zv.data.data_ptr(), L.zv.stride};
    p.sigma = sigma.defined() ? sigma.data_ptr<float>() : nullptr;
    p.q = rows.qr.data_ptr<float>() + row * h * dh;
    p.q_latent = rows.q_sel.data_ptr<float>() + row * h * r;
    p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
    p.out = rows.out.data_ptr<float>() + row * h * dh;
    p.out_latent = rows.out_latent.data_ptr<float>() + row * h * r;
    const absl::Status st = kernels::FactoredDecode(p);
    TORCH_CHECK(st.ok(), "factored decode kernel: ", std::string(st.message()));
  }

  // a·V_s + B_hⱽ (a·Z_V) + the value bias delta: [N, H, dh] or [N, Hkv, g, dh].
  at::Tensor KernelResult(int64_t index, const KernelRows& rows) const {
    const Layer& L = layers_[index];
    if (FloatLoopsServe({L.v.up_rows, L.v.delta})) {
      return ValueResult(rows.out, rows.out_latent, L.v);
    }
    return Grouped(rows.out) + UpProject(Grouped(rows.out_latent), L.v) +
           L.v.delta.unsqueeze(1);
  }

  // Standard attention over per-head keys (normalised, rotated, σ applied) and
  // values rebuilt in fp32 from the stored cache, whatever the mode stored.
  at::Tensor AttendMaterialized(int64_t index, const at::Tensor& q,
                                int64_t pos) {
    Layer& L = layers_[index];
    const int64_t n = pos + 1, dh = config_.head_dim,
                  hkv = config_.num_kv_heads;
    const auto z = ReadSegment(L.zk, n);  // [B, L, Hkv, r]
    at::Tensor residual;                  // [B, L, Hkv, dh]
    if (mode_ == DecodeMode::kPlane) {
      // Latents were rotated (and γ-scaled) at write time: scatter them into
      // their planes.
      residual = at::zeros({z.size(0), n, hkv, dh}, at::kFloat);
      residual.scatter_(3,
                        L.coords.view({1, 1, hkv, L.coords.size(1)})
                            .expand({z.size(0), n, -1, -1}),
                        z);
    } else if (mode_ == DecodeMode::kNaive) {
      residual = at::einsum("blhr,hdr->blhd", {z, L.k.up}) * L.gamma;
    } else {
      residual = rope(index).Rotate(
          (at::einsum("blhr,hdr->blhd", {z, L.k.up}) + L.k.delta) * L.gamma,
          at::arange(n, at::kLong));
    }
    const auto ks = ReadSegment(L.ks, n);  // [B, L, dh], or [B, L, 2dh] split
    auto k = split_ ? ks.narrow(-1, 0, dh).unsqueeze(2) * L.gbar +
                          ks.narrow(-1, dh, dh).unsqueeze(2) * L.gdelta + residual
                    : ks.unsqueeze(2) + residual;
    if (apply_sigma_) k = k * Read(L.sigma, n).unsqueeze(-1);
    auto v = ReadSegment(L.vs, n).unsqueeze(2) +
             at::einsum("blhr,hdr->blhd", {ReadSegment(L.zv, n), L.v.up}) +
             L.v.delta;
    const auto qr = Grouped(RotateAt(index, q, pos));
    auto probs = at::softmax(at::einsum("bhgd,blhd->bhgl", {qr, k}) /
                                 std::sqrt(static_cast<double>(dh)),
                             -1);
    return at::einsum("bhgl,blhd->bhgd", {probs, v}).reshape(q.sizes());
  }

  // The key norm's weights differ per head (OLMo-2 normalises the whole
  // projection), so the shared key, which every head reads, cannot carry them,
  // and γ_h does not commute with a rotation whose two coordinates it weighs
  // differently. On a plane (a, b), diag(γ_a, γ_b) = ḡ·I + δ·J with
  // J = diag(1, −1), so P_t(γ ⊙ k) = ḡ P_t k + δ P_t (J k): the cache holds
  // P_t k_s and P_t J k_s (2·d_h, shared) and each head weighs them on the
  // query side. Exact for rotating and position-free pairs alike.
  void SplitGamma(const Rope& rope, Layer* layer) const {
    const int64_t dh = config_.head_dim;
    layer->gbar = layer->gamma.clone();
    layer->gdelta = at::zeros_like(layer->gamma);
    layer->jsign = at::zeros({dh}, layer->gamma.options());
    for (int64_t p = 0; p < rope.planes(); ++p) {
      const auto [a, b] = rope.PlaneCoordinates(p);
      const auto ga = layer->gamma.select(1, a), gb = layer->gamma.select(1, b);
      const auto mean = (ga + gb) / 2, half_diff = (ga - gb) / 2;
      for (int64_t c : {a, b}) {
        layer->gbar.select(1, c).copy_(mean);
        layer->gdelta.select(1, c).copy_(half_diff);
      }
      layer->jsign[a] = 1;
      layer->jsign[b] = -1;
    }
  }

  const char* cache_layout() const override {
    return tiled_ ? "tiles" : "rows";
  }

  std::vector<at::Tensor*> CacheTensors() override {
    std::vector<at::Tensor*> out;
    for (auto& L : layers_) {
      for (at::Tensor* t :
           {&L.ks.data, &L.vs.data, &L.zk.data, &L.zv.data, &L.sigma}) {
        if (t->defined()) out.push_back(t);
      }
    }
    return out;
  }

 private:
  // One cached segment of a layer (shared key or value, K or V latents):
  // rows [B, capacity, rest...], or the kernels' tiled layout
  // (kernels/decode_params.h, CacheLayout::kTiles) as [B, tiles, S/P, 16, P]
  // for keys and [B, tiles, 16/P, S, P] for values, S the tiled stride and P
  // the elements per 32-bit lane.
  struct Segment {
    at::Tensor data;
    std::vector<int64_t> rest;  // a position's shape
    int64_t width = 0;          // its elements
    int64_t stride = 0;         // elements per position in the layout
    bool key = false;
  };

  Segment NewSegment(bool key, std::vector<int64_t> rest) const {
    Segment s;
    s.rest = rest;
    s.key = key;
    s.width = 1;
    for (int64_t d : rest) s.width *= d;
    if (!tiled_) {
      // Blocks run along a position's whole row (the kernel's segment), so a
      // quantized segment is stored flat.
      s.stride = s.width;
      s.data = NewCache(options_.cache_blocks ? std::vector<int64_t>{s.width}
                                              : rest);
      return s;
    }
    const int64_t lane = kernels::ElementsPerLane(KernelCacheDType());
    const int64_t tile = kernels::kCacheTile;
    s.stride = kernels::TiledStride(KernelCacheDType(), key, s.width);
    const std::vector<int64_t> shape =
        key ? std::vector<int64_t>{options_.batch, capacity() / tile,
                                   s.stride / lane, tile, lane}
            : std::vector<int64_t>{options_.batch, capacity() / tile,
                                   tile / lane, s.stride, lane};
    s.data = at::zeros(shape, at::TensorOptions().dtype(options_.cache_dtype));
    return s;
  }

  // value [R, ...] at `at`: one position (a step) or consecutive ones (a prefill).
  void WriteSegment(Segment& s, const RowPositions& at, const at::Tensor& value) const {
    if (!at.consecutive) return WriteSegment(s, at.pos, value);
    if (!tiled_) return Write(s.data, at, value);
    for (int64_t t = 0; t < value.size(0); ++t) WriteSegment(s, at.pos + t, value.narrow(0, t, 1));
  }

  // value [B, rest...] at position pos. The tiled layout is written element by
  // element at kernels::SegmentOffset: a step wrote each of its 5 entries per
  // layer and sequence through about six ATen operations (reshape, selects,
  // copy_), which ran on one core between the step's parallel products. The
  // bf16 rounding is c10::BFloat16's, as copy_'s; a bf16 key of odd width keeps
  // its zero column from allocation.
  void WriteSegment(Segment& s, int64_t pos, const at::Tensor& value) const {
    if (!tiled_) return Write(s.data, pos, value);
    const at::Tensor rows = value.to(at::kFloat).contiguous();
    TORCH_CHECK(rows.numel() == options_.batch * s.width, "cache entry of ",
                rows.numel(), " values for ", options_.batch, " rows of ",
                s.width);
    const float* in = rows.data_ptr<float>();
    const int64_t lane = s.data.size(4);
    const bool bf16 = s.data.scalar_type() == at::kBFloat16;
    auto* f32 = bf16 ? nullptr : s.data.data_ptr<float>();
    auto* b16 = bf16 ? s.data.data_ptr<at::BFloat16>() : nullptr;
    for (int64_t b = 0; b < options_.batch; ++b) {
      for (int64_t c = 0; c < s.width; ++c) {
        const int64_t at =
            kernels::SegmentOffset(kernels::CacheLayout::kTiles, s.key, lane,
                                   s.stride, capacity(), b, pos, c);
        const float x = in[b * s.width + c];
        if (bf16) {
          b16[at] = at::BFloat16(x);
        } else {
          f32[at] = x;
        }
      }
    }
  }

  // Positions 0..n-1 as fp32 rows [B, n, rest...].
  at::Tensor ReadSegment(const Segment& s, int64_t n) const {
    const int64_t b = options_.batch;
    if (!tiled_) {
      std::vector<int64_t> shape = {b, n};
      shape.insert(shape.end(), s.rest.begin(), s.rest.end());
      return Read(s.data, n).view(shape);
    }
    const auto rows = (s.key ? s.data.permute({0, 1, 3, 2, 4})
                             : s.data.permute({0, 1, 2, 4, 3}))
                          .reshape({b, capacity(), s.stride})
                          .narrow(1, 0, n)
                          .narrow(2, 0, s.width)
                          .to(at::kFloat);
    std::vector<int64_t> shape = {b, n};
    shape.insert(shape.end(), s.rest.begin(), s.rest.end());
    return rows.reshape(shape);
  }

  // One Append's cache entries for rows x [R, d] (σ undefined without
  // QK-norm).
  struct Entries {
    at::Tensor sigma, ks, zk, vs, zv;
  };

  // The entries of rows x; rotate(t) turns t [R, n, d] and rotate_pairs(z,
  // planes) the latents [R, Hkv, r] at the rows' positions.
  template <typename Rotate, typename RotatePairs>
  Entries EntriesOf(int64_t index, const at::Tensor& x, Rotate rotate,
                    RotatePairs rotate_pairs) {
    Layer& L = layers_[index];
    Entries e;
    auto [ks, zk] = Project(L.k, x);
    if (config_.qk_norm && FloatLoopsServe({ks, zk, L.k.up_rows, L.k.delta})) {
      e.sigma = KeyNormScales(ks, zk, L.k, config_.qk_norm_over_heads,
                              config_.rms_norm_eps);
    } else if (config_.qk_norm) {
      // Rebuild the full key once to get its scale (per head, or over all).
      auto k = ks.unsqueeze(1) + UpProject(zk.unsqueeze(2), L.k).squeeze(2) +
               L.k.delta;
      const auto ms = config_.qk_norm_over_heads
                          ? k.pow(2).mean({-2, -1}).unsqueeze(-1)
                          : k.pow(2).mean({-1});
      e.sigma = at::rsqrt(ms + config_.rms_norm_eps);
    }
    if (split_) {  // [P_t k_s ; P_t J k_s]
      e.ks = rotate(at::stack({ks, ks * L.jsign}, 1)).flatten(1);
    } else {
      e.ks = rotate((ks * L.gamma[0]).unsqueeze(1)).squeeze(1);
    }
    if (mode_ == DecodeMode::kPlane) {
      zk = rotate_pairs(FloatLoopsServe({zk, L.latent_bias, L.latent_gamma})
                            ? ScaledLatents(zk, L.latent_bias, L.latent_gamma)
                            : (zk + L.latent_bias) * L.latent_gamma,
                        L.planes);
    } else if (mode_ == DecodeMode::kNaive) {
      zk = rotate_pairs(zk, L.planes);
    }
    e.zk = zk;
    std::tie(e.vs, e.zv) = Project(L.v, x);
    return e;
  }

  // x's shared projection [R, dh] and latents x·downᵀ of every head [R, Hkv,
  // r] under f: one product where the two matrices lie adjacent, else two.
  static std::pair<at::Tensor, at::Tensor> Project(const Factors& f,
                                                   const at::Tensor& x) {
    const int64_t rows = x.size(0), dh = f.shared.size(0), hkv = f.down.size(0),
                  r = f.down.size(1);
    if (!f.shared_and_down.defined()) {
      return {
          SlotLinear(x, f.shared, f.shared_bias),
          SlotLinear(x, f.down.reshape({-1, x.size(1)})).view({rows, hkv, r})};
    }
    const at::Tensor y = SlotLinear(x, f.shared_and_down);
    at::Tensor shared = y.narrow(1, 0, dh);
    if (f.shared_bias.defined()) {
      shared = shared + f.shared_bias.to(shared.scalar_type());
    }
    return {shared.contiguous(),
            y.narrow(1, dh, hkv * r).contiguous().view({rows, hkv, r})};
  }

  void WriteEntries(int64_t index, const RowPositions& at, const Entries& e) {
    Layer& L = layers_[index];
    if (e.sigma.defined()) Write(L.sigma, at, e.sigma);
    WriteSegment(L.ks, at, e.ks);
    WriteSegment(L.zk, at, e.zk);
    WriteSegment(L.vs, at, e.vs);
    WriteSegment(L.zv, at, e.zv);
  }

  // `engines` as LRKV engines of this one's mode, cache and options, injected
  // fault included (so that one's entries and kernel parameters serve all);
  // false if any is not.
  bool PeersOf(const std::vector<DecodeEngine*>& engines,
               std::vector<LrkvEngine*>* peers) const {
    for (DecodeEngine* e : engines) {
      auto* l = dynamic_cast<LrkvEngine*>(e);
      if (l == nullptr || l->mode_ != mode_ || l->kernel_ != kernel_ ||
          l->tiled_ != tiled_ || l->split_ != split_ ||
          l->apply_sigma_ != apply_sigma_ || l->options_.batch != 1 ||
          l->options_.fault != options_.fault ||
          l->options_.cache_dtype != options_.cache_dtype ||
          l->options_.cache_blocks != options_.cache_blocks ||
          l->options_.materialize != options_.materialize) {
        return false;
      }
      peers->push_back(l);
    }
    return true;
  }

  struct Layer {
    Factors k, v;
    at::Tensor gamma;                      // [Hkv, dh]: k_norm γ, or ones
    // Split weights (OLMo-2): per plane, ḡ = (γ_a + γ_b)/2 and δ = (γ_a − γ_b)/2 on
    // both of its coordinates (position-free ones: γ and 0), and J's signs [dh].
    at::Tensor gbar, gdelta, jsign;
    at::Tensor coords, planes;             // plane / naive modes
    at::Tensor latent_bias, latent_gamma;  // plane mode: [Hkv, r]
    Segment ks, vs, zk, zv;                // the cache
    at::Tensor sigma;                      // [B, capacity, Hkv] (QK-norm)
  };
  std::vector<Layer> layers_;
  bool kernel_ = false;  // plane mode through kernels::FactoredDecode
  bool split_ = false;   // per-head key-norm weights: two-part shared key
  bool apply_sigma_ = false;  // QK-norm's σ enters the scores (not for kDropSigma)
  at::ScalarType sum_dtype_ = at::kFloat;  // ATen paths: of the shared + residual sums
  bool tiled_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeEngine>> MakeLrkvEngine(
    const ModelConfig& config, const LlamaWeights& weights, DecodeMode mode,
    const EngineOptions& options) {
  auto engine = std::make_unique<LrkvEngine>(config, weights, mode, options);
  if (auto st = engine->Init(); !st.ok()) return st;
  return std::unique_ptr<DecodeEngine>(std::move(engine));
}

}  // namespace lrkv
