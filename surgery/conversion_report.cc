// Conversion reports as JSON and as a readable table (see the header).
#include "surgery/conversion_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "surgery/kv_variant.h"

namespace lrkv {
namespace {

nlohmann::json ProjectionJson(const ProjectionReport& p) {
  nlohmann::json j = {{"objective", p.objective},
                      {"head_rel_error", p.head_rel_error},
                      {"rel_error", p.rel_error}};
  if (!p.planes.empty()) j["planes"] = p.planes;
  if (p.objective.size() > 1) {
    // Every step, float32 and float64 (the objective records the latter).
    j["iterations"] = p.float32_steps + p.objective.size() - 1;
    j["float32_steps"] = p.float32_steps;
    j["final_objective"] = p.final_objective;
    j["converged"] = p.converged;
  }
  return j;
}

// The latent norm's table: per layer, the error it adds before healing, γ
// alone's, and the fit's choices (surgery/latent_norm_fit.h).
std::string LatentNormTable(const nlohmann::json& j) {
  std::string out;
  absl::StrAppend(&out,
                  "\nlatent norm (kv_a_layernorm): relative error it adds to "
                  "the RoPE-free keys and values before healing, on held-out "
                  "calibration samples\n"
                  "layer     error  gamma alone  basis          up refit\n");
  for (const auto& l : j.value("layers", nlohmann::json::array())) {
    const nlohmann::json& e = l["latent_norm_error"];
    const nlohmann::json fit =
        l.value("latent_norm_fit", nlohmann::json::object());
    const nlohmann::json plain = fit.value("plain_error", nlohmann::json());
    if (!e.is_number()) {
      absl::StrAppendFormat(&out,
                            "%5d  not measured (gamma from the weights, "
                            "whitened basis: give --calib)\n",
                            l.value("layer", int64_t{0}));
      continue;
    }
    absl::StrAppendFormat(&out, "%5d  %8.5f  %11.5f  %-13s  %s\n",
                          l.value("layer", int64_t{0}), e.get<double>(),
                          plain.is_number() ? plain.get<double>() : 0.0,
                          fit.value("basis", std::string("?")),
                          fit.value("refit", false) ? "yes" : "no");
  }
  return out;
}

}  // namespace

nlohmann::json ConversionReport::ToJson() const {
  nlohmann::json layers_json = nlohmann::json::array();
  for (const auto& l : layers) {
    nlohmann::json lj = {{"layer", l.layer}, {"k", ProjectionJson(l.k)}, {"v", ProjectionJson(l.v)}};
    if (l.size > 0 || KvVariantTypeOf(target.variant).allocatable()) {
      lj["size"] = l.size;
    }
    if (target.rope_dim > 0) {  // decoupled RoPE
      lj["rope"] = {{"shared_energy", l.shared_rope_energy},
                    {"kept_plane_energy", l.kept_plane_energy}};
    }
    if (latent_norm) {
      auto number = [](double x) {
        return std::isnan(x) ? nlohmann::json() : nlohmann::json(x);
      };
      lj["latent_norm_error"] = number(l.latent_norm_error);
      lj["latent_norm_fit"] = {
          {"plain_error", number(l.latent_norm_plain_error)},
          {"basis", l.latent_norm_whitened ? "whitened" : "factorisation"},
          {"refit", l.latent_norm_refit}};
    }
    layers_json.push_back(std::move(lj));
  }
  nlohmann::json j = {
      {"source", source},
      {"output", output},
      {"shape",
       {{"layers", shape.layers},
        {"hidden", shape.d()},
        {"heads", shape.heads},
        {"kv_heads", shape.source_kv_heads()},
        {"head_dim", shape.head_dim},
        {"qk_norm", shape.qk_norm},
        {"qk_norm_over_heads", shape.qk_norm_over_heads}}},
      {"variant", KvVariantName(target.variant)},
      {"config", target.ToString()},
      {"rank", target.rank},
      {"kv_heads", target.kv_heads},
      {"latent", target.latent},
      {"metric", SurgeryMetricName(metric)},
      {"rope_mode", rope_mode_applies ? RopeModeName(rope_mode) : "unchanged"},
      {"rope_planes_kept", rope_planes_kept},
      {"rope_dim", target.rope_dim},
      {"latent_norm", latent_norm},
      {"budget", budget},
      {"cache_elements_per_token_layer", footprint.elements_per_token_layer},
      {"cache_elements_per_token", footprint.elements_per_token},
      {"cache_ratio_to_source", footprint.ratio_to_source},
      {"cache_ratio_to_mha", footprint.ratio_to_mha},
      {"kv_params_per_layer", footprint.kv_params_per_layer},
      {"kv_param_ratio_to_source", footprint.param_ratio_to_source},
      {"calibration_tokens", calibration_tokens},
      {"damping", damping},
      {"solver", {{"max_iters", solver_max_iters}, {"tol", solver_tol}}},
      {"allocation", {{"method", SizeAllocationName(allocation)}}},
      {"wall_seconds", wall_seconds},
      {"calibration_seconds", calibration_seconds},
      {"evaluation_seconds", evaluation_seconds},
      {"total_seconds", total_seconds},
      {"threads", threads},
      {"layers", layers_json},
  };
  if (perplexity_before) j["perplexity_before"] = *perplexity_before;
  if (perplexity_after) j["perplexity_after"] = *perplexity_after;
  if (eval_tokens > 0) j["eval_tokens"] = eval_tokens;
  if (allocation == SizeAllocation::kLayers) {
    j["allocation"]["estimated_error"] = allocation_estimated_error;
    j["allocation"]["uniform_estimated_error"] = allocation_uniform_error;
    j["allocation"]["budget_elements_per_token"] = allocation_budget_elements;
    j["allocation"]["kept_uniform"] = allocation_kept_uniform;
    j["allocation"]["sizes"] = target.layer_sizes;
    j["allocation"]["objective"] = AllocationObjectiveName(allocation_objective);
    auto curves = nlohmann::json::array();
    for (size_t l = 0; l < allocation_curves.size(); ++l) {
      curves.push_back({{"layer", l},
                        {"sizes", allocation_curves[l].sizes},
                        {"errors", allocation_curves[l].errors}});
    }
    j["allocation"]["curves"] = curves;
    if (allocation_objective == AllocationObjective::kLoss) {
      j["allocation"]["source_loss"] = allocation_source_loss;
      j["allocation"]["loss_tokens"] = allocation_loss_tokens;
      j["allocation"]["plan_loss"] = allocation_plan_loss;
      j["allocation"]["uniform_loss"] = allocation_uniform_loss;
      j["allocation"]["curves_plan_loss"] = allocation_curves_plan_loss;
      j["allocation"]["written_loss"] = allocation_written_loss;
      j["allocation"]["plans_measured"] = allocation_plans_measured;
      j["allocation"]["moves"] = allocation_moves;
    }
  }
  return j;
}

std::string ConversionReport::ToTable() const { return ConversionTableFromJson(ToJson()); }

std::string ConversionTableFromJson(const nlohmann::json& j) {
  auto num = [&](const char* key) { return j.value(key, 0.0); };
  auto str = [&](const char* key) { return j.value(key, std::string()); };
  auto max_of = [](const nlohmann::json& v) {
    double m = 0;
    for (const auto& x : v) m = std::max(m, x.get<double>());
    return m;
  };
  std::string out = absl::StrFormat(
      "conversion   %s -> %s (%s metric, RoPE %s)\n"
      "cache        %d elements/token/layer: %.2f%% of the source cache, %.2f%% of MHA\n"
      "K/V params   %d per layer: %.2f%% of the source\n"
      "calibration  %d tokens\n",
      str("source"), str("config"), str("metric"), str("rope_mode"),
      j.value("cache_elements_per_token_layer", int64_t{0}),
      100 * num("cache_ratio_to_source"), 100 * num("cache_ratio_to_mha"),
      j.value("kv_params_per_layer", int64_t{0}), 100 * num("kv_param_ratio_to_source"),
      j.value("calibration_tokens", int64_t{0}));
  absl::StrAppendFormat(&out,
                        "time         %.2f s in all (opening, calibration %.2f s, "
                        "decomposition %.2f s, evaluation %.2f s, writing)\n",
                        num("total_seconds"), num("calibration_seconds"),
                        num("wall_seconds"), num("evaluation_seconds"));
  if (j.contains("perplexity_before") && j.contains("perplexity_after")) {
    absl::StrAppendFormat(&out, "perplexity   %.4f -> %.4f (%d tokens)\n",
                          num("perplexity_before"), num("perplexity_after"),
                          j.value("eval_tokens", int64_t{0}));
  }
  if (const auto a = j.value("allocation", nlohmann::json::object());
      a.value("method", std::string()) == "layers") {
    const bool loss = a.value("objective", std::string()) == "loss";
    absl::StrAppendFormat(
        &out,
        "allocation   per layer within %d cache elements/token: estimated %s %.5g "
        "(uniform %.5g)%s\n",
        a.value("budget_elements_per_token", int64_t{0}),
        loss ? "loss change (nats/token, layers converted one at a time, summed)" : "error",
        a.value("estimated_error", 0.0), a.value("uniform_estimated_error", 0.0),
        a.value("kept_uniform", false) ? ", so the uniform plan is kept" : "");
    if (loss) {
      absl::StrAppendFormat(
          &out,
          "             measured on %d calibration tokens: source %.5f, uniform %.5f, "
          "curves' plan %.5f, chosen %.5f, written %.5f (%d plans measured, %d moves)\n",
          a.value("loss_tokens", int64_t{0}), a.value("source_loss", 0.0),
          a.value("uniform_loss", 0.0), a.value("curves_plan_loss", 0.0),
          a.value("plan_loss", 0.0), a.value("written_loss", 0.0), a.value("plans_measured", 0),
          a.value("moves", 0));
    }
  }
  absl::StrAppend(
      &out,
      "\nlayer  size  K rel.err  K worst head  K iters   V rel.err  V worst head  V iters\n");
  bool capped = false;
  // Iterations of the LRKV solver, '*' where it hit its cap before its tolerance.
  auto iters = [&](const nlohmann::json& p) {
    const int n = p.value("iterations", 0);
    const bool converged = p.value("converged", true);
    capped = capped || !converged;
    return absl::StrCat(n, converged ? "" : "*");
  };
  for (const auto& l : j.value("layers", nlohmann::json::array())) {
    const nlohmann::json& k = l["k"];
    const nlohmann::json& v = l["v"];
    absl::StrAppendFormat(&out, "%5d  %4s  %9.5f  %12.5f  %8s   %9.5f  %12.5f  %8s\n",
                          l.value("layer", int64_t{0}),
                          l.contains("size") ? absl::StrCat(l["size"].get<int64_t>()) : "-",
                          k.value("rel_error", 0.0),
                          max_of(k["head_rel_error"]), iters(k), v.value("rel_error", 0.0),
                          max_of(v["head_rel_error"]), iters(v));
  }
  bool rope_header = false;
  for (const auto& l : j.value("layers", nlohmann::json::array())) {
    if (!l.contains("rope")) continue;
    if (!rope_header) {
      absl::StrAppendFormat(&out,
                            "\ndecoupled RoPE: %d dims (planes 0..%d) shared by all heads\n"
                            "layer  kept planes' share of K energy  carried by the shared key\n",
                            j.value("rope_dim", int64_t{0}),
                            j.value("rope_planes_kept", int64_t{0}) - 1);
      rope_header = true;
    }
    absl::StrAppendFormat(&out, "%5d  %30.2f%%  %24.2f%%\n", l.value("layer", int64_t{0}),
                          100 * l["rope"].value("kept_plane_energy", 0.0),
                          100 * l["rope"].value("shared_energy", 0.0));
  }
  if (j.value("latent_norm", false)) absl::StrAppend(&out, LatentNormTable(j));
  if (capped) {
    const nlohmann::json solver = j.value("solver", nlohmann::json::object());
    absl::StrAppendFormat(&out,
                          "* stopped at --iters %d before the objective settled to --tol %g; "
                          "raise --iters for the converged decomposition\n",
                          solver.value("max_iters", 0), solver.value("tol", 0.0));
  }
  return out;
}

}  // namespace lrkv
