// Converts a model's K/V projections into a target variant (see converter.h).
#include "surgery/converter.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/rope.h"
#include "base/status_macros.h"
#include "surgery/baselines.h"
#include "surgery/decoupled_rope.h"
#include "surgery/budget_allocation.h"
#include "surgery/lrkv_decomposition.h"
#include "surgery/shared_plane.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// Coordinates (within a head) of each plane a plane-mode residual may select: the
// RoPE rotation planes by frequency index, then the position-free pairs a partial
// rotary leaves (frequency 0, so selecting them is as exact as a rotation plane).
std::vector<std::pair<int64_t, int64_t>> HeadPlanes(const Rope& rope) {
  std::vector<std::pair<int64_t, int64_t>> planes;
  for (int64_t p = 0; p < rope.head_planes(); ++p) planes.push_back(rope.PlaneCoordinates(p));
  return planes;
}

// [H_kv*dh, d] -> W [H_kv, d, dh] (the DESIGN.md orientation).
at::Tensor HeadsOf(const at::Tensor& w, int64_t hkv, int64_t dh) {
  return w.view({hkv, dh, -1}).transpose(1, 2);
}

ProjectionReport ReportOf(const LrkvDecomposition& dec) {
  ProjectionReport p;
  // The solver's own objective (with its gauge term), which never increases.
  p.objective = dec.gauged_objective;
  p.final_objective = dec.objective.back();
  p.head_rel_error = dec.head_rel_error;
  p.rel_error = dec.rel_error;
  p.planes = dec.planes_chosen;
  p.converged = dec.converged;
  return p;
}

// Splits per-head biases [H_kv*dh] into their mean and the per-head deltas.
void SplitBias(const at::Tensor& bias, int64_t hkv, int64_t dh, LowRankProjection* p) {
  if (!bias.defined()) return;
  auto heads = bias.view({hkv, dh});
  p->shared_bias = heads.mean(0).contiguous();
  p->head_bias = (heads - p->shared_bias).reshape({-1}).contiguous();
}

LowRankProjection ToProjection(const LrkvDecomposition& dec, int64_t hkv, int64_t r) {
  LowRankProjection p;
  const int64_t d = dec.shared.size(0);
  p.shared = dec.shared.t().contiguous().to(at::kFloat);                   // [dh, d]
  p.down = dec.down.transpose(1, 2).reshape({hkv * r, d}).contiguous().to(at::kFloat);
  p.up = dec.up.contiguous().to(at::kFloat);                               // [hkv, dh, r]
  return p;
}

// Per source KV head: ‖M(W_h − Ŵ_{j(h)})‖/‖M W_h‖ where j(h) is the pooled head that
// h's first query head uses.
ProjectionReport PooledReport(const ModelConfig& c, const at::Tensor& src,
                              const at::Tensor& pooled, int64_t n_kv,
                              const at::Tensor& whitening) {
  ProjectionReport p;
  const int64_t dh = c.head_dim, g_src = c.num_heads / c.num_kv_heads,
                g_dst = c.num_heads / n_kv;
  std::vector<at::Tensor> approx;
  for (int64_t h = 0; h < c.num_kv_heads; ++h) {
    const int64_t j = h * g_src / g_dst;
    const auto wh = src.narrow(0, h * dh, dh), ph = pooled.narrow(0, j * dh, dh);
    p.head_rel_error.push_back(RelativeError(wh, ph, whitening));
    approx.push_back(ph);
  }
  p.rel_error = RelativeError(src, at::cat(approx, 0), whitening);
  return p;
}

// The tensors a conversion reads from a source layer, in float32 (weights loaded in
// their stored bf16/f16 are widened here, one layer at a time; the solvers work in
// float64 from these exact values).
LayerWeights KvInFloat32(const LayerWeights& l) {
  auto f32 = [](const at::Tensor& t) { return t.defined() ? t.to(at::kFloat) : t; };
  LayerWeights out;
  out.wk = f32(l.wk);
  out.wv = f32(l.wv);
  out.bk = f32(l.bk);
  out.bv = f32(l.bv);
  out.k_norm = f32(l.k_norm);
  return out;
}

// Sizes around `uniform` whose error curve a per-layer allocation measures: uniform ±
// k·step for k up to `steps` (every size for small ones), multiples of `unit`, within
// [0, top].
std::vector<int64_t> CurveGrid(int64_t uniform, int64_t unit, int64_t top, int64_t steps) {
  const int64_t step = std::max<int64_t>(unit, (uniform / 8) / unit * unit);
  std::vector<int64_t> grid;
  for (int64_t k = -steps; k <= steps; ++k) {
    const int64_t r = uniform + k * step;
    if (r >= 0 && r <= top) grid.push_back(r);
  }
  return grid;
}

}  // namespace

absl::StatusOr<ConvertedModel> ConvertModel(const ModelConfig& config,
                                            const LlamaWeights& weights,
                                            const ConversionOptions& o,
                                            const CalibrationStats* calibration,
                                            ConversionReport* report,
                                            const StopCheck& stop,
                                            const KvLossProbe& loss_probe) {
  ASSIGN_OR_RETURN(KvConfig target, ResolveTarget(config, o));
  if (o.metric == SurgeryMetric::kActivation &&
      (calibration == nullptr ||
       static_cast<int64_t>(calibration->gram.size()) != config.num_layers)) {
    return Invalid("the activation metric needs calibration text (--calib)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  at::NoGradGuard no_grad;
  ConvertedModel out{config, weights};
  ModelConfig& c = out.config;
  const int64_t hkv = config.num_kv_heads, dh = config.head_dim;
  const int64_t kept = RopePlanesKept(config, o);
  const bool decoupled = target.variant == KvVariant::kMla && o.rope_mode == RopeMode::kPartial;
  switch (target.variant) {
    case KvVariant::kGqa:
      c.num_kv_heads = target.kv_heads;
      break;
    case KvVariant::kMqa:
      c.num_kv_heads = 1;
      break;
    case KvVariant::kMla:
      c.kv.layout = KvLayout::kMla;
      c.kv.latent = target.latent;
      c.kv.rope_mode = o.rope_mode;
      c.kv.rope_planes_kept = kept;
      break;
    case KvVariant::kLrkv:
      c.kv.layout = KvLayout::kLrkv;
      c.kv.rank = target.rank;
      c.kv.rope_mode = o.rope_mode;  // shared-plane too (surgery/shared_plane.h)
      c.kv.rope_planes_kept = kept;
      break;
    case KvVariant::kMha:
      break;
  }
  LrkvDecompositionOptions k_opt, v_opt;
  k_opt.rank = v_opt.rank = target.rank;
  k_opt.max_iters = v_opt.max_iters = o.max_iters;
  k_opt.tol = v_opt.tol = o.tol;
  // The K residual's support in layer i (a NoPE layer's planes are all position-free).
  auto set_k_support = [&](int64_t i, std::vector<std::pair<int64_t, int64_t>>* planes) {
    const Rope rope(config, i);
    *planes = HeadPlanes(rope);
    if (o.rope_mode == RopeMode::kPlane) {
      k_opt.support = ResidualSupport::kRopePlanes;
      k_opt.planes = *planes;
    } else if (o.rope_mode == RopeMode::kPartial) {
      k_opt.support = ResidualSupport::kExcludeCoords;
      k_opt.excluded.clear();
      for (int64_t p = 0; p < std::min(kept, rope.planes()); ++p) {
        k_opt.excluded.push_back((*planes)[p].first);
        k_opt.excluded.push_back((*planes)[p].second);
      }
    }
  };
  auto whitening_of = [&](int64_t i) -> absl::StatusOr<at::Tensor> {
    if (o.metric != SurgeryMetric::kActivation) return at::Tensor();
    return WhiteningFactor(calibration->gram[i], calibration->tokens, o.damping);
  };
  // K and V side by side, one thread each: the solver's operations are too small to use
  // two threads well (measured: one thread per step is as fast as two).
  using KvDecomposition = std::pair<LrkvDecomposition, LrkvDecomposition>;
  // LRKV error curves: ranks uniform ± k·step, k up to this.
  constexpr int64_t kCurveSteps = 4;
  // A warm start: the shared projections S of K and V.
  using SharedKv = std::pair<at::Tensor, at::Tensor>;
  auto decompose_kv = [&](const LayerWeights& src, const at::Tensor& whitening,
                          int64_t rank, const SharedKv* warm)
      -> absl::StatusOr<KvDecomposition> {
    LrkvDecompositionOptions ko = k_opt, vo = v_opt;
    ko.rank = vo.rank = rank;
    if (warm != nullptr) {
      ko.initial_shared = warm->first;
      vo.initial_shared = warm->second;
    }
    absl::StatusOr<LrkvDecomposition> kv_dec[2];
    at::parallel_for(0, 2, 1, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        kv_dec[j] = j == 0 ? DecomposeLrkv(HeadsOf(src.wk, hkv, dh), whitening, ko)
                           : DecomposeLrkv(HeadsOf(src.wv, hkv, dh), whitening, vo);
      }
    });
    RETURN_IF_ERROR(kv_dec[0].status());
    RETURN_IF_ERROR(kv_dec[1].status());
    return KvDecomposition{std::move(*kv_dec[0]), std::move(*kv_dec[1])};
  };
  // The LRKV factors of layer `src` at rank r into `l`, with the source's biases split
  // into shared and per-head parts.
  auto set_lrkv = [&](const KvDecomposition& kv, int64_t r,
                      const std::vector<std::pair<int64_t, int64_t>>& planes,
                      const LayerWeights& src, LayerWeights* l) {
    l->k_lr = ToProjection(kv.first, hkv, r);
    l->v_lr = ToProjection(kv.second, hkv, r);
    SplitBias(src.bk, hkv, dh, &l->k_lr);
    SplitBias(src.bv, hkv, dh, &l->v_lr);
    if (l->k_lr.head_bias.defined() && o.rope_mode != RopeMode::kReconstruct) {
      // A per-head key bias must live where the residual does (the selected planes,
      // or the position-free coordinates) for the factored decode to stay exact;
      // the rest of it is dropped, an approximation of the source.
      auto keep = at::zeros({hkv, dh}, at::kFloat);
      for (int64_t h = 0; h < hkv; ++h) {
        if (o.rope_mode == RopeMode::kPlane) {
          if (h >= static_cast<int64_t>(kv.first.planes_chosen.size())) continue;  // r = 0
          for (int64_t p : kv.first.planes_chosen[h]) {
            keep[h][planes[p].first] = 1;
            keep[h][planes[p].second] = 1;
          }
        } else {
          keep[h].fill_(1);
          for (int64_t c : k_opt.excluded) keep[h][c] = 0;
        }
      }
      l->k_lr.head_bias = (l->k_lr.head_bias.view({hkv, dh}) * keep).reshape({-1});
    }
    l->wk = l->wv = l->bk = l->bv = at::Tensor();
  };

  // Per-layer sizes: the uniform target, or a budget allocation from each layer's error
  // curve (LRKV: measured around its uniform decomposition, kept for reuse and warm
  // starts; MLA: the exact SVD tail).
  const bool sized = target.variant == KvVariant::kLrkv || target.variant == KvVariant::kMla;
  const int64_t uniform_size = target.variant == KvVariant::kLrkv ? target.rank : target.latent;
  std::vector<int64_t> sizes(config.num_layers, uniform_size);
  std::vector<std::optional<KvDecomposition>> uniform_dec(config.num_layers);
  // The curves' S at every size, from which the final pass starts: the solver's
  // problem is not convex, and the plan was rated with these solutions (a start from
  // the uniform S can end elsewhere: on stories260K, calibration loss 2.71 vs 2.33).
  std::vector<std::map<int64_t, SharedKv>> curve_shared(config.num_layers);
  std::optional<BudgetAllocation> allocation;
  std::vector<LayerErrorCurve> curves;
  const bool by_layers = sized && o.allocation == SizeAllocation::kLayers;
  const bool by_loss = by_layers && (o.allocation_objective == AllocationObjective::kLoss ||
                                     (o.allocation_objective == AllocationObjective::kAuto &&
                                      loss_probe && !decoupled));
  if (by_loss && !loss_probe) {
    return Invalid("--allocation-objective loss measures the loss on calibration text (--calib)");
  }
  // Per-layer sizes by loss: every layer's candidate K/V at each size on its curve (in
  // c's layout), and the source's dense K/V that the probes start from.
  std::vector<std::map<int64_t, LayerWeights>> candidates(config.num_layers);
  std::vector<DenseKv> source_kv;
  double base_loss = 0;  // the source's, which every loss curve is measured against
  if (by_loss) {
    RETURN_IF_ERROR(CheckStop(stop, "allocation (the source's loss)"));
    for (const LayerWeights& l : weights.layers) source_kv.push_back(ExpandKv(config, l));
    ASSIGN_OR_RETURN(base_loss, loss_probe(source_kv));
  }
  // The loss change with layer i alone converted to `layer`, kept as a candidate.
  auto loss_change = [&](int64_t i, int64_t size,
                         LayerWeights layer) -> absl::StatusOr<double> {
    RETURN_IF_ERROR(CheckStop(stop, absl::StrCat("allocation (loss of layer ", i, ")")));
    std::vector<DenseKv> kv = source_kv;
    kv[i] = ExpandKv(c, layer);
    ASSIGN_OR_RETURN(const double loss, loss_probe(kv));
    candidates[i][size] = std::move(layer);
    return loss - base_loss;
  };
  // The loss of the model converted at `plan` (candidate sizes).
  auto plan_loss = [&](const std::vector<int64_t>& plan) -> absl::StatusOr<double> {
    RETURN_IF_ERROR(CheckStop(stop, "allocation (loss of a plan)"));
    std::vector<DenseKv> kv;
    for (int64_t i = 0; i < config.num_layers; ++i) {
      kv.push_back(ExpandKv(c, candidates[i].at(plan[i])));
    }
    return loss_probe(kv);
  };
  std::optional<JointRefinement> refinement;
  if (by_layers) {
    for (int64_t i = 0; i < config.num_layers; ++i) {
      RETURN_IF_ERROR(CheckStop(stop, absl::StrCat("error curves (layer ", i, ")")));
      std::vector<std::pair<int64_t, int64_t>> planes;
      set_k_support(i, &planes);
      const LayerWeights src = KvInFloat32(weights.layers[i]);
      ASSIGN_OR_RETURN(at::Tensor whitening, whitening_of(i));
      LayerErrorCurve curve;
      if (target.variant == KvVariant::kMla) {
        // Decoupled RoPE: the latent compresses the key less its shared rotated part.
        const at::Tensor wk =
            decoupled ? SplitDecoupledRope(config, i, weights.layers[i].wq.to(at::kFloat),
                                           at::Tensor(), src.wk, at::Tensor(), whitening,
                                           kept)
                            .wk_nope
                      : src.wk;
        if (by_loss) {
          // A forward pass per size: a grid around the uniform latent, not every latent
          // (up to the rank of [W_K | W_V]).
          const int64_t top = wk.size(0) + src.wv.size(0);
          for (const int64_t s : CurveGrid(uniform_size, 1, top, kCurveSteps)) {
            if (s == 0) continue;
            MlaFactors f = FactorizeMla(wk, src.wv, whitening, s);
            LayerWeights probe;
            probe.kv_down = f.kv_down;
            probe.k_up = f.k_up;
            probe.v_up = f.v_up;
            probe.bk = src.bk;
            probe.bv = src.bv;
            ASSIGN_OR_RETURN(const double d, loss_change(i, s, std::move(probe)));
            curve.sizes.push_back(s);
            curve.errors.push_back(d);
          }
        } else {
          const std::vector<double> e = MlaErrorCurve(wk, src.wv, whitening);
          for (int64_t s = 1; s < static_cast<int64_t>(e.size()); ++s) {
            curve.sizes.push_back(s);
            curve.errors.push_back(e[s]);
          }
        }
      } else {
        // Converged decompositions on a grid of ranks around the uniform one (every rank
        // for small heads), each warm-started from its neighbour towards the uniform.
        const int64_t top = dh - static_cast<int64_t>(k_opt.excluded.size());
        const int64_t unit = o.rope_mode == RopeMode::kPlane ? 2 : 1;
        const std::vector<int64_t> grid = CurveGrid(uniform_size, unit, top, kCurveSteps);
        std::vector<double> errors(grid.size());
        const size_t mid = std::find(grid.begin(), grid.end(), uniform_size) - grid.begin();
        for (int dir : {+1, -1}) {
          std::optional<SharedKv> prev;
          for (size_t g = mid; g < grid.size(); g += dir) {
            if (dir < 0 && g == mid) {
              prev = curve_shared[i].at(uniform_size);
              continue;
            }
            ASSIGN_OR_RETURN(KvDecomposition kv,
                             decompose_kv(src, whitening, grid[g], prev ? &*prev : nullptr));
            prev = curve_shared[i][grid[g]] = SharedKv{kv.first.shared, kv.second.shared};
            if (by_loss) {
              LayerWeights probe;
              set_lrkv(kv, grid[g], planes, src, &probe);
              ASSIGN_OR_RETURN(errors[g], loss_change(i, grid[g], std::move(probe)));
            } else {
              errors[g] = kv.first.objective.back() + kv.second.objective.back();
            }
            if (g == mid) uniform_dec[i] = std::move(kv);
            if (dir < 0 && g == 0) break;
          }
        }
        curve.sizes = grid;
        curve.errors = errors;
      }
      curves.push_back(std::move(curve));
    }
    const AttentionShape shape = ShapeOf(config);
    const int64_t budget_elements =
        o.budget > 0 ? static_cast<int64_t>(std::floor(o.budget * config.num_layers *
                                                       SourceCacheElements(shape) + 1e-9))
                     : CacheElementsAllLayers(shape, target);
    auto cost = [&](int64_t size) {
      KvConfig k = target;
      (target.variant == KvVariant::kLrkv ? k.rank : k.latent) = size;
      return CacheElementsPerToken(shape, k);
    };
    ASSIGN_OR_RETURN(allocation, AllocateBudget(curves, cost, budget_elements, uniform_size));
    sizes = allocation->sizes;
    if (by_loss) {
      // The curves' plan against the uniform one, then moves, by the measured loss of
      // the whole converted model.
      ASSIGN_OR_RETURN(refinement, RefineByJointLoss(curves, sizes, uniform_size, cost,
                                                     budget_elements, plan_loss));
      ASSIGN_OR_RETURN(allocation, AllocationAt(curves, refinement->sizes, cost,
                                                budget_elements, uniform_size));
      sizes = allocation->sizes;
    }
    candidates.clear();
    if (!allocation->uniform) {
      target.layer_sizes = sizes;
      (target.variant == KvVariant::kLrkv ? target.rank : target.latent) =
          *std::max_element(sizes.begin(), sizes.end());
      c.kv.layer_sizes = sizes;
      if (target.variant == KvVariant::kLrkv) {
        c.kv.rank = target.rank;
      } else {
        c.kv.latent = target.latent;
      }
    }
  }

  std::vector<LayerReport> layer_reports;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    RETURN_IF_ERROR(CheckStop(stop, absl::StrCat("conversion (layer ", i, ")")));
    std::vector<std::pair<int64_t, int64_t>> planes;
    set_k_support(i, &planes);
    LayerWeights& l = out.weights.layers[i];
    const LayerWeights src = KvInFloat32(weights.layers[i]);
    ASSIGN_OR_RETURN(at::Tensor whitening, whitening_of(i));
    LayerReport lr;
    lr.layer = i;
    switch (target.variant) {
      case KvVariant::kGqa:
      case KvVariant::kMqa: {
        const int64_t n = c.num_kv_heads;
        l.wk = PoolKvHeads(config, src.wk, n);
        l.wv = PoolKvHeads(config, src.wv, n);
        if (src.bk.defined()) {
          l.bk = PoolKvHeads(config, src.bk, n);
          l.bv = PoolKvHeads(config, src.bv, n);
        }
        // OLMo-2's key norm has weights per KV head: pooled alike.
        if (config.qk_norm_over_heads) l.k_norm = PoolKvHeads(config, src.k_norm, n);
        lr.k = PooledReport(config, src.wk, l.wk, n, whitening);
        lr.v = PooledReport(config, src.wv, l.wv, n, whitening);
        break;
      }
      case KvVariant::kMla: {
        if (!decoupled) {
          MlaFactors f = FactorizeMla(src.wk, src.wv, whitening, sizes[i]);
          l.wk = l.wv = at::Tensor();
          l.kv_down = f.kv_down;
          l.k_up = f.k_up;
          l.v_up = f.v_up;
          lr.k.rel_error = f.k_rel_error;
          lr.v.rel_error = f.v_rel_error;
          lr.size = sizes[i];
          break;
        }
        const at::Tensor bq = l.bq.defined() ? l.bq.to(at::kFloat) : at::Tensor();
        DecoupledRopeSplit split = SplitDecoupledRope(config, i, l.wq.to(at::kFloat), bq,
                                                      src.wk, src.bk, whitening, kept);
        MlaFactors f = FactorizeMla(split.wk_nope, src.wv, whitening, sizes[i]);
        l.wk = l.wv = at::Tensor();
        l.kv_down = f.kv_down;
        l.k_up = f.k_up;
        l.v_up = f.v_up;
        l.bk = split.bk_nope;
        l.k_rope = split.k_rope;
        l.bk_rope = split.bk_rope;
        l.q_rope = split.q_rope;
        l.bq_rope = split.bq_rope;
        // The key's weight-space error: its rotated part is carried exactly (what it
        // loses is rotation, a change of function measured by the evaluation).
        const auto k_hat = at::matmul(f.k_up, f.kv_down) + (src.wk - split.wk_nope);
        lr.k.rel_error = RelativeError(src.wk, k_hat, whitening);
        lr.v.rel_error = f.v_rel_error;
        lr.size = sizes[i];
        lr.shared_rope_energy = split.shared_rope_energy;
        lr.kept_plane_energy = split.kept_plane_energy;
        break;
      }
      case KvVariant::kLrkv: {
        // The uniform decomposition of the curves pass is reused at the uniform size and
        // warm-starts the others.
        if (o.rope_mode == RopeMode::kSharedPlane) {
          // K: H_kv·r/2 latent planes shared by the heads; V: the usual per-head LRKV.
          absl::StatusOr<SharedPlaneDecomposition> kd;
          absl::StatusOr<LrkvDecomposition> vd;
          at::parallel_for(0, 2, 1, [&](int64_t begin, int64_t end) {
            for (int64_t j = begin; j < end; ++j) {
              if (j == 0) {
                kd = DecomposeSharedPlanes(HeadsOf(src.wk, hkv, dh), whitening, planes,
                                           hkv * sizes[i] / 2, o.max_iters, o.tol);
              } else {
                LrkvDecompositionOptions vo = v_opt;
                vo.rank = sizes[i];
                vd = DecomposeLrkv(HeadsOf(src.wv, hkv, dh), whitening, vo);
              }
            }
          });
          RETURN_IF_ERROR(kd.status());
          RETURN_IF_ERROR(vd.status());
          l.k_lr = kd->projection;
          l.v_lr = ToProjection(*vd, hkv, sizes[i]);
          l.wk = l.wv = l.bk = l.bv = at::Tensor();
          lr.k.objective = kd->objective;
          lr.k.final_objective = kd->objective.back();
          lr.k.head_rel_error = kd->head_rel_error;
          lr.k.rel_error = kd->rel_error;
          lr.k.converged = kd->converged;
          lr.k.planes = {kd->planes};
          lr.v = ReportOf(*vd);
          lr.size = sizes[i];
          break;
        }
        KvDecomposition kv;
        if (uniform_dec[i] && sizes[i] == uniform_size) {
          kv = std::move(*uniform_dec[i]);
        } else {
          const auto warm = curve_shared[i].find(sizes[i]);
          ASSIGN_OR_RETURN(kv, decompose_kv(src, whitening, sizes[i],
                                            warm != curve_shared[i].end() ? &warm->second
                                                                          : nullptr));
        }
        uniform_dec[i].reset();
        curve_shared[i].clear();
        set_lrkv(kv, sizes[i], planes, src, &l);
        lr.k = ReportOf(kv.first);
        lr.v = ReportOf(kv.second);
        lr.size = sizes[i];
        break;
      }
      case KvVariant::kMha:
        break;
    }
    layer_reports.push_back(std::move(lr));
  }
  RETURN_IF_ERROR(c.Validate());
  // The written model's loss: the final pass re-solves each layer from the S the plan
  // was rated with, so this should match the plan's (up to the solver's tolerance).
  double written_loss = 0;
  if (refinement) {
    std::vector<DenseKv> kv;
    for (const LayerWeights& l : out.weights.layers) kv.push_back(ExpandKv(c, l));
    ASSIGN_OR_RETURN(written_loss, loss_probe(kv));
  }
  if (report != nullptr) {
    report->shape = ShapeOf(config);
    report->target = target;
    report->metric = SurgeryMetricName(o.metric);
    report->rope_mode = RopeModeName(o.rope_mode);
    report->rope_planes_kept = kept;
    report->budget = o.budget;
    report->footprint = MeasureFootprint(report->shape, target, 1, 1, 1);
    report->calibration_tokens = calibration != nullptr ? calibration->tokens : 0;
    report->damping = o.metric == SurgeryMetric::kActivation ? o.damping : 0;
    report->solver_max_iters = o.max_iters;
    report->solver_tol = o.tol;
    report->layers = std::move(layer_reports);
    report->allocation = SizeAllocationName(o.allocation);
    if (allocation) {
      report->allocation_estimated_error = allocation->estimated_error;
      report->allocation_uniform_error = allocation->uniform_estimated_error;
      report->allocation_budget_elements = allocation->budget_elements;
      report->allocation_kept_uniform = allocation->uniform;
      report->allocation_objective = by_loss ? "loss" : "error";
      report->allocation_curves = curves;
      report->allocation_source_loss = base_loss;
      if (refinement) {
        report->allocation_plan_loss = refinement->loss;
        report->allocation_uniform_loss = refinement->uniform_loss;
        report->allocation_curves_plan_loss = refinement->start_loss;
        report->allocation_plans_measured = refinement->evaluations;
        report->allocation_moves = refinement->moves;
        report->allocation_written_loss = written_loss;
      }
    }
    report->threads = at::get_num_threads();
    report->wall_seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - t0).count();
  }
  return out;
}

ConvertedModel ExpandModel(const ModelConfig& config, const LlamaWeights& weights) {
  ConvertedModel out{config, weights};
  for (size_t i = 0; i < weights.layers.size(); ++i) {
    DenseKv dense = ExpandKv(config, weights.layers[i]);
    LayerWeights& l = out.weights.layers[i];
    l.wk = dense.wk.contiguous();
    l.wv = dense.wv.contiguous();
    l.bk = dense.bk.defined() ? dense.bk.contiguous() : dense.bk;
    l.bv = dense.bv.defined() ? dense.bv.contiguous() : dense.bv;
    l.k_lr = l.v_lr = LowRankProjection();
    l.kv_down = l.k_up = l.v_up = at::Tensor();
  }
  // Partial RoPE changes the function; the expanded model keeps that setting.
  out.config.kv.layout = KvLayout::kDense;
  out.config.kv.rank = out.config.kv.latent = 0;
  out.config.kv.layer_sizes.clear();
  if (out.config.kv.rope_mode != RopeMode::kPartial) {
    out.config.kv.rope_mode = RopeMode::kReconstruct;
  }
  return out;
}

}  // namespace lrkv
