// What a conversion did and measured: target configuration, cache and parameter
// accounting, per-layer objective traces and per-head errors, wall time, and the
// perplexity before/after when evaluated. Printed as JSON and as a readable table.
#ifndef LRKV_SURGERY_CONVERSION_REPORT_H_
#define LRKV_SURGERY_CONVERSION_REPORT_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "surgery/budget_allocation.h"
#include "surgery/cache_accounting.h"
#include "surgery/conversion_options.h"

namespace lrkv {

struct ProjectionReport {
  // LRKV: the solver's objective Σ_h‖M(W_h − Ŵ_h)‖² + ε·Σ_h‖MU_h‖² (its gauge term, see
  // lrkv_decomposition.h) after initialisation and each float64 iteration; it never
  // increases.
  std::vector<double> objective;
  // LRKV: Σ_h‖M(W_h − Ŵ_h)‖² at the end, without the gauge term.
  double final_objective = 0;
  // ‖M(W_h − Ŵ_h)‖ / ‖M W_h‖ per source KV head.
  std::vector<double> head_rel_error;
  double rel_error = 0;
  // LRKV: the float32 steps before the float64 ones `objective` records.
  int float32_steps = 0;
  // LRKV: whether the solver stopped on its tolerance (false: on its iteration cap).
  bool converged = true;
  // Plane mode: the RoPE planes each head's residual keeps.
  std::vector<std::vector<int64_t>> planes;
};

struct LayerReport {
  int64_t layer = 0;
  int64_t size = 0;  // LRKV rank / MLA latent of this layer (0 for GQA/MQA)
  ProjectionReport k, v;
  // MLA with decoupled RoPE (surgery/decoupled_rope.h): of the kept planes' key energy,
  // the share the shared rotated key carries; of the key's, the share in the kept planes.
  double shared_rope_energy = 0, kept_plane_energy = 0;
  // MLA with a latent norm: the relative error the norm adds to the RoPE-free
  // keys and values on held-out calibration samples
  // (surgery/latent_norm_fit.h); NaN when fitted without them.
  // `..._plain_error`: the same with the factorisation's basis and γ alone;
  // whitened / refit: the choices kept.
  double latent_norm_error = std::numeric_limits<double>::quiet_NaN();
  double latent_norm_plain_error = std::numeric_limits<double>::quiet_NaN();
  bool latent_norm_whitened = false, latent_norm_refit = false;
};

struct ConversionReport {
  std::string source;
  std::string output;
  AttentionShape shape;
  KvConfig target;
  SurgeryMetric metric = SurgeryMetric::kWeight;
  RopeMode rope_mode = RopeMode::kReconstruct;
  // False for a target with per-head K/V (GQA, MQA): RoPE stays as the source applies
  // it, and the report says "unchanged" rather than a mode that did nothing.
  bool rope_mode_applies = true;
  int64_t rope_planes_kept = 0;
  bool latent_norm = false;  // MLA: the latent's RMSNorm (LayerReport)
  double budget = 0;      // requested budget (0 when an explicit size was given)
  CacheFootprint footprint;         // per token per layer, ratios
  int64_t calibration_tokens = 0;
  double damping = 0;
  int solver_max_iters = 0;         // LRKV solver settings
  double solver_tol = 0;
  double wall_seconds = 0;          // the decomposition itself
  double calibration_seconds = 0;   // collecting activation statistics
  double evaluation_seconds = 0;    // perplexity before and after
  // The whole conversion: opening the source, calibration, decomposition, evaluation
  // and writing the checkpoint (all but this report's own two files).
  double total_seconds = 0;
  int threads = 0;                  // intra-op threads LibTorch used
  std::vector<LayerReport> layers;
  // Uniform or per-layer sizes; for per-layer, what the curves measured (error or loss),
  // their estimate of the summed error of the plan and of the uniform one (for "loss":
  // the summed loss changes, nats/token), the cache elements (all layers, per token)
  // allowed, whether the uniform plan was kept (rated no worse), every layer's curve,
  // and for "loss" the source's calibration loss and the tokens it was measured on.
  SizeAllocation allocation = SizeAllocation::kUniform;
  // kError or kLoss (resolved from kAuto).
  AllocationObjective allocation_objective = AllocationObjective::kError;
  double allocation_estimated_error = 0, allocation_uniform_error = 0;
  int64_t allocation_budget_elements = 0;
  bool allocation_kept_uniform = false;
  std::vector<LayerErrorCurve> allocation_curves;
  double allocation_source_loss = 0;
  int64_t allocation_loss_tokens = 0;
  // For "loss", measured on the whole converted model: the chosen plan's loss, the
  // uniform plan's, the curves' own plan's (before moves), the written model's (re-solved
  // from the S the plan was rated with), how many plans were measured and how many
  // moves were accepted.
  double allocation_plan_loss = 0, allocation_uniform_loss = 0,
         allocation_curves_plan_loss = 0, allocation_written_loss = 0;
  int allocation_plans_measured = 0, allocation_moves = 0;
  std::optional<double> perplexity_before;
  std::optional<double> perplexity_after;
  int64_t eval_tokens = 0;

  nlohmann::json ToJson() const;
  // ConversionTableFromJson(ToJson()).
  std::string ToTable() const;
};

// The readable table of a conversion report's JSON: what `lrkv convert` prints, here or
// (from the job's report) through lrkvd, so that both print the same.
std::string ConversionTableFromJson(const nlohmann::json& report);

}  // namespace lrkv

#endif  // LRKV_SURGERY_CONVERSION_REPORT_H_
