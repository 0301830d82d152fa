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
  ASSIGN_OR_RETURN(auto checks, store.Rows<v1::Check>(job_id));
  if (!checks.empty()) {
    bool all = true;
    for (v1::Check& c : checks) {
      // A check that does not apply neither passes nor fails the job, unless
      // it was asked for by name ("n/a (required)").
      all = all && (c.passed() || c.verdict() == "n/a");
      *out->mutable_verification()->add_checks() = std::move(c);
    }
    out->mutable_verification()->set_passed(all);
  }
  ASSIGN_OR_RETURN(auto cache, store.Rows<v1::CacheRow>(job_id));
  for (v1::CacheRow& c : cache) *out->add_cache() = std::move(c);
  ASSIGN_OR_RETURN(auto latency, store.Rows<v1::LatencyRow>(job_id));
  for (v1::LatencyRow& l : latency) *out->add_latency() = std::move(l);
  ASSIGN_OR_RETURN(auto curve, store.Rows<v1::LossPoint>(job_id));
  for (v1::LossPoint& p : curve) *out->add_loss_curve() = std::move(p);
  ASSIGN_OR_RETURN(auto evals, store.Rows<v1::Evaluation>(job_id));
  for (v1::Evaluation& e : evals) *out->add_evaluations() = std::move(e);
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
