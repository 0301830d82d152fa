// The store's measurement tables with rows of their own shape (see store.h):
// conversions and their per-layer errors, and comparison rows. The tables of
// proto rows (cache, latency, evaluations, ...) are store.cc's AddRows/Rows.
// Every write is one IMMEDIATE transaction; every read is ordered.
#include <mutex>

#include "base/status_macros.h"
#include "service/store.h"

namespace lrkv::service {
namespace {

std::optional<double> NullableDouble(const Statement& s, int column) {
  if (s.IsNull(column)) return std::nullopt;
  return s.Double(column);
}

std::optional<int64_t> NullableInt64(const Statement& s, int column) {
  if (s.IsNull(column)) return std::nullopt;
  return s.Int64(column);
}

}  // namespace

absl::Status Store::AddConversion(const std::string& job_id,
                                  const ConversionRow& row) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ASSIGN_OR_RETURN(auto tx, Transaction::Begin(*db_));
  constexpr char kConversion[] =
      "INSERT OR REPLACE INTO conversions (job_id, config, cache_ratio, "
      "kv_param_ratio, "
      "wall_seconds) VALUES (?, ?, ?, ?, ?)";
  constexpr char kLayer[] =
      "INSERT OR REPLACE INTO conversion_layers (job_id, config, layer, k_rel, "
      "v_rel) "
      "VALUES (?, ?, ?, ?, ?)";
  {
    ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, kConversion));
    RETURN_IF_ERROR(s.Bind(1, job_id)
                        .Bind(2, row.config)
                        .Bind(3, row.cache_ratio)
                        .Bind(4, row.kv_param_ratio)
                        .Bind(5, row.wall_seconds)
                        .Run());
  }
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, kLayer));
  for (const auto& l : row.layers) {
    RETURN_IF_ERROR(s.Bind(1, job_id)
                        .Bind(2, row.config)
                        .Bind(3, l.layer)
                        .Bind(4, l.k_rel)
                        .Bind(5, l.v_rel)
                        .Run());
  }
  return tx->Commit();
}

absl::StatusOr<std::vector<ConversionRow>> Store::Conversions(
    const std::string& job_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  constexpr char kConversions[] =
      "SELECT config, cache_ratio, kv_param_ratio, wall_seconds FROM "
      "conversions "
      "WHERE job_id = ? ORDER BY config";
  constexpr char kLayers[] =
      "SELECT layer, k_rel, v_rel FROM conversion_layers WHERE job_id = ? AND "
      "config = ? "
      "ORDER BY layer";
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, kConversions));
  s.Bind(1, job_id);
  ASSIGN_OR_RETURN(auto rows,
                   ReadRows<ConversionRow>(s, [](const Statement& q) {
                     ConversionRow r;
                     r.config = q.Text(0);
                     r.cache_ratio = q.Double(1);
                     r.kv_param_ratio = q.Double(2);
                     r.wall_seconds = q.Double(3);
                     return r;
                   }));
  for (auto& r : rows) {
    ASSIGN_OR_RETURN(auto l, Statement::Prepare(*db_, kLayers));
    l.Bind(1, job_id).Bind(2, r.config);
    ASSIGN_OR_RETURN(
        r.layers, ReadRows<ConversionRow::Layer>(l, [](const Statement& q) {
          return ConversionRow::Layer{q.Int64(0), q.Double(1), q.Double(2)};
        }));
  }
  return rows;
}

absl::Status Store::AddComparison(const std::string& job_id, const CompareRow& r) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ASSIGN_OR_RETURN(auto tx, Transaction::Begin(*db_));
  constexpr char kSql[] =
      "INSERT OR REPLACE INTO comparison_rows (job_id, model, budget, variant, rope_mode, "
      "config, cache_ratio, kv_params, ppl_before, ppl_after, kl_mean, heal_kept_step, "
      "verdict, verify_error, verify_bound, step_ms, step_ratio_to_mha, step_context, "
      "madds_per_step) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, kSql));
  RETURN_IF_ERROR(s.Bind(1, job_id)
                      .Bind(2, r.model)
                      .Bind(3, r.budget)
                      .Bind(4, r.variant)
                      .Bind(5, r.rope_mode)
                      .Bind(6, r.config)
                      .Bind(7, r.cache_ratio)
                      .Bind(8, r.kv_params)
                      .Bind(9, r.ppl_before)
                      .Bind(10, r.ppl_after)
                      .Bind(11, r.kl_mean)
                      .Bind(12, r.heal_kept_step)
                      .Bind(13, r.verdict)
                      .Bind(14, r.verify_error)
                      .Bind(15, r.verify_bound)
                      .Bind(16, r.step_ms)
                      .Bind(17, r.step_ratio_to_mha)
                      .Bind(18, r.step_context)
                      .Bind(19, r.madds_per_step)
                      .Run());
  return tx->Commit();
}

absl::StatusOr<std::vector<CompareRow>> Store::Comparison(const std::string& job_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  constexpr char kSql[] =
      "SELECT model, budget, variant, rope_mode, config, cache_ratio, kv_params, ppl_before, "
      "ppl_after, kl_mean, heal_kept_step, verdict, verify_error, verify_bound, step_ms, "
      "step_ratio_to_mha, step_context, madds_per_step FROM comparison_rows WHERE job_id = ? "
      "ORDER BY model, budget, variant, rope_mode";
  ASSIGN_OR_RETURN(auto s, Statement::Prepare(*db_, kSql));
  s.Bind(1, job_id);
  return ReadRows<CompareRow>(s, [](const Statement& q) {
    CompareRow r;
    r.model = q.Text(0);
    r.budget = q.Double(1);
    r.variant = q.Text(2);
    r.rope_mode = q.Text(3);
    r.config = q.Text(4);
    r.cache_ratio = q.Double(5);
    r.kv_params = q.Int64(6);
    r.ppl_before = q.Double(7);
    r.ppl_after = NullableDouble(q, 8);
    r.kl_mean = NullableDouble(q, 9);
    r.heal_kept_step = NullableInt64(q, 10);
    r.verdict = q.Text(11);
    r.verify_error = q.Double(12);
    r.verify_bound = q.Double(13);
    r.step_ms = q.Double(14);
    r.step_ratio_to_mha = q.Double(15);
    r.step_context = q.Int64(16);
    r.madds_per_step = q.Int64(17);
    return r;
  });
}

}  // namespace lrkv::service
