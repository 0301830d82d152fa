// Builds a job's typed report from the store (see report_builder.h).
#include "service/report_builder.h"

#include "base/status_macros.h"

namespace lrkv::service {

absl::Status FillReportSections(Store& store, const std::string& job_id,
                                v1::Report* out) {
  ASSIGN_OR_RETURN(auto conversions, store.Conversions(job_id));
  if (!conversions.empty()) {
    // A job converts once; compare jobs keep their conversions in the
    // comparison rows.
    const ConversionRow& c = conversions.front();
    auto* s = out->mutable_conversion();
    s->set_config(c.config);
    s->set_cache_ratio_to_source(c.cache_ratio);
    s->set_kv_param_ratio_to_source(c.kv_param_ratio);
    s->set_wall_seconds(c.wall_seconds);
    for (const auto& l : c.layers) {
      auto* layer = s->add_layers();
      layer->set_layer(l.layer);
      layer->set_k_rel_error(l.k_rel);
      layer->set_v_rel_error(l.v_rel);
    }
  }
  ASSIGN_OR_RETURN(auto checks, store.Verification(job_id));
  if (!checks.empty()) {
    bool all = true;
    for (const auto& c : checks) {
      auto* check = out->mutable_verification()->add_checks();
      check->set_name(c.check);
      check->set_passed(c.passed);
      check->set_max_rel_error(c.max_rel);
      check->set_cos_dist(c.cos_dist);
      check->set_detail(c.detail);
      check->set_verdict(c.verdict);
      check->set_error(c.error);
      check->set_bound(c.bound);
      check->set_ratio(c.ratio);
      // A check that does not apply neither passes nor fails the job, unless
      // it was asked for by name ("n/a (required)").
      all = all && (c.passed || c.verdict == "n/a");
    }
    out->mutable_verification()->set_passed(all);
  }
  ASSIGN_OR_RETURN(auto cache, store.Cache(job_id));
  for (const auto& c : cache) {
    auto* row = out->add_cache();
    row->set_engine(c.engine);
    row->set_variant(c.variant);
    row->set_tokens(c.tokens);
    row->set_used_bytes(c.used_bytes);
    row->set_formula_bytes(c.formula_bytes);
  }
  ASSIGN_OR_RETURN(auto latency, store.Latency(job_id));
  for (const auto& l : latency) {
    auto* row = out->add_latency();
    row->set_variant(l.variant);
    row->set_engine(l.engine);
    row->set_context(l.context);
    row->set_median_ms(l.median_ms);
    row->set_gbps(l.gbps);
    row->set_ratio_to_mha(l.ratio_to_mha);
    row->set_tokens_per_second(l.tokens_per_second);
  }
  ASSIGN_OR_RETURN(auto curve, store.LossCurve(job_id));
  for (const auto& p : curve) {
    auto* point = out->add_loss_curve();
    point->set_step(p.step);
    point->set_kind(p.kind);
    point->set_loss(p.loss);
    point->set_lr(p.lr);
  }
  ASSIGN_OR_RETURN(auto evals, store.Evaluations(job_id));
  for (const auto& e : evals) {
    auto* row = out->add_evaluations();
    row->set_label(e.label);
    row->set_tokens(e.tokens);
    row->set_perplexity(e.perplexity);
  }
  ASSIGN_OR_RETURN(auto comparison, store.Comparison(job_id));
  for (const auto& c : comparison) {
    auto* row = out->add_comparison();
    row->set_model(c.model);
    row->set_budget(c.budget);
    row->set_variant(c.variant);
    row->set_rope_mode(c.rope_mode);
    row->set_config(c.config);
    row->set_cache_ratio(c.cache_ratio);
    row->set_kv_params(c.kv_params);
    row->set_ppl_before(c.ppl_before);
    if (c.ppl_after) row->set_ppl_after(*c.ppl_after);
    if (c.kl_mean) row->set_kl_mean(*c.kl_mean);
    row->set_verdict(c.verdict);
    row->set_step_ms(c.step_ms);
    row->set_step_ratio_to_mha(c.step_ratio_to_mha);
    row->set_madds_per_step(c.madds_per_step);
    if (c.heal_kept_step) row->set_heal_kept_step(*c.heal_kept_step);
    row->set_verify_error(c.verify_error);
    row->set_verify_bound(c.verify_bound);
    row->set_step_context(c.step_context);
  }
  return absl::OkStatus();
}

}  // namespace lrkv::service
