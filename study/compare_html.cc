// The comparison study as HTML (see compare_html.h).
#include "study/compare_html.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "study/svg_plot.h"

namespace lrkv {
namespace {

std::string SeriesName(const CompareRow& r) {
  return r.variant == "gqa" || r.variant == "mqa"
             ? r.variant
             : absl::StrCat(r.variant, " ", r.rope_mode);
}

double BestPerplexity(const CompareRow& r) {
  return r.ppl_after ? *r.ppl_after : r.ppl_before;
}

}  // namespace

absl::StatusOr<CompareReport> CompareReportFromJson(const nlohmann::json& j) {
  CompareReport r;
  try {
    r.model = j.at("model").get<std::string>();
    r.source_perplexity = j.at("source_perplexity").get<double>();
    r.eval_tokens = j.at("eval_tokens").get<int64_t>();
    for (const auto& x : j.at("rows")) {
      CompareRow row;
      row.model = x.at("model").get<std::string>();
      row.budget = x.at("budget").get<double>();
      row.variant = x.at("variant").get<std::string>();
      row.rope_mode = x.at("rope_mode").get<std::string>();
      row.config = x.at("config").get<std::string>();
      row.cache_ratio = x.at("cache_ratio").get<double>();
      row.kv_params = x.at("kv_params_per_layer").get<int64_t>();
      row.ppl_before = x.at("ppl_before_healing").get<double>();
      if (x.contains("ppl_after_healing"))
        row.ppl_after = x["ppl_after_healing"].get<double>();
      if (x.contains("kl_mean")) row.kl_mean = x["kl_mean"].get<double>();
      row.verdict = x.at("verdict").get<std::string>();
      row.step_ms = x.at("step_ms").get<double>();
      row.step_ratio_to_mha = x.at("step_ratio_to_mha").get<double>();
      row.madds_per_step =
          x.at("attention_madds_per_step_layer").get<int64_t>();
      r.rows.push_back(row);
    }
    for (const auto& x : j.at("latency")) {
      r.latency.push_back(
          {r.model, x.at("config").get<std::string>(),
           x.at("rope_mode").get<std::string>(), x.at("context").get<int64_t>(),
           x.at("step_ms").get<double>(), x.at("ratio_to_mha").get<double>()});
    }
    for (const auto& n : j.at("notes")) r.notes.push_back(n.get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a comparison report: ", e.what()));
  }
  return r;
}

std::string CompareReportHtml(const CompareReport& r,
                              const std::string& provenance) {
  // 1. Perplexity against cache ratio: one line per variant, healed solid,
  // unhealed dashed.
  std::map<std::string, PlotSeries> before, after;
  for (const auto& row : r.rows) {
    const std::string name = SeriesName(row);
    before[name].name = name + (row.ppl_after ? " (converted)" : "");
    before[name].dashed = true;
    before[name].points.push_back({100 * row.cache_ratio, row.ppl_before});
    if (row.ppl_after) {
      after[name].name = name + " (healed)";
      after[name].points.push_back({100 * row.cache_ratio, *row.ppl_after});
    }
  }
  // One colour per variant, shared by its converted and healed lines.
  std::map<std::string, int> colors;
  for (const auto& [name, s] : before)
    colors.emplace(name, static_cast<int>(colors.size()));
  std::vector<PlotSeries> quality;
  for (auto& [name, s] : after) {
    s.color = colors[name];
    quality.push_back(s);
  }
  for (auto& [name, s] : before) {
    s.color = colors[name];
    quality.push_back(s);
  }
  quality.push_back(
      {"source (MHA)", {{100.0, r.source_perplexity}}, false, false});
  PlotOptions q;
  q.title = absl::StrCat(
      r.model, ": perplexity vs KV-cache size (lower-left is better)");
  q.x_label = "KV cache, % of the source model's";
  q.y_label = "held-out perplexity (log scale)";
  q.log_y = true;
  // 2. Perplexity against decode step time, one line per variant across
  // budgets.
  std::map<std::string, PlotSeries> trade;
  for (const auto& row : r.rows) {
    const std::string name = SeriesName(row);
    trade[name].name = name;
    trade[name].points.push_back({row.step_ratio_to_mha, BestPerplexity(row)});
  }
  std::vector<PlotSeries> trade_series;
  for (auto& [name, s] : trade) {
    s.color = colors[name];
    trade_series.push_back(s);
  }
  trade_series.push_back(
      {"source (MHA)", {{1.0, r.source_perplexity}}, false, false});
  PlotOptions t;
  t.title = "perplexity vs decode step time (each point one budget)";
  t.x_label = "decode step time / source MHA step time";
  t.y_label = "perplexity, healed when healed (log scale)";
  t.log_y = true;
  // 3. Decode step time against context length.
  std::map<std::string, PlotSeries> lat;
  for (const auto& l : r.latency) {
    const std::string name = absl::StrCat(l.config, " ", l.rope_mode);
    lat[name].name = name;
    lat[name].points.push_back({static_cast<double>(l.context), l.step_ms});
  }
  std::vector<PlotSeries> lat_series;
  for (auto& [name, s] : lat) lat_series.push_back(s);
  PlotOptions c;
  c.title = "decode step latency vs context length (whole model, this machine)";
  c.x_label = "tokens in the cache (log scale)";
  c.y_label = "ms per decode step (log scale)";
  c.log_x = c.log_y = true;
  c.height = 480;

  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta "
      "charset=\"utf-8\">\n<title>lrkv comparison: ",
      EscapeXml(r.model),
      "</"
      "title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:2em "
      "auto;color:#222}"
      "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid "
      "#ccc;padding:3px 7px;"
      "text-align:right}td:nth-child(2),td:nth-child(3),td:nth-child(9){text-"
      "align:left}"
      "figure{margin:1.5em 0}</style></head><body>\n<h1>Variants at equal "
      "KV-cache budget: ",
      EscapeXml(r.model), "</h1>\n<p>", EscapeXml(provenance), "</p>\n",
      absl::StrFormat("<p>Source perplexity %.4f on %d held-out tokens.</p>\n",
                      r.source_perplexity, r.eval_tokens));
  absl::StrAppend(&html, "<figure id=\"quality\">", RenderSvgPlot(q, quality),
                  "</figure>\n", "<figure id=\"tradeoff\">",
                  RenderSvgPlot(t, trade_series), "</figure>\n",
                  "<figure id=\"latency\">", RenderSvgPlot(c, lat_series),
                  "</figure>\n");
  html +=
      "<h2>Rows</h2>\n<table><tr><th>budget</th><th>config</th><th>RoPE</"
      "th><th>cache vs "
      "source</th><th>K/V params/layer</th><th>ppl converted</th><th>ppl "
      "healed</th><th>KL to "
      "source</th><th>verification</th><th>step vs MHA</th><th>attention "
      "MACs/step/layer</th></tr>\n";
  for (const auto& row : r.rows) {
    absl::StrAppendFormat(
        &html,
        "<tr><td>%.2f</td><td>%s</td><td>%s</td><td>%.1f%%</td><td>%d</"
        "td><td>%.3f</td><td>%s</td>"
        "<td>%s</td><td>%s</td><td>%.2f&times;</td><td>%d</td></tr>\n",
        row.budget, EscapeXml(row.config), EscapeXml(row.rope_mode),
        100 * row.cache_ratio, row.kv_params, row.ppl_before,
        row.ppl_after ? absl::StrFormat("%.3f", *row.ppl_after) : "&ndash;",
        row.kl_mean ? absl::StrFormat("%.3f", *row.kl_mean) : "&ndash;",
        EscapeXml(row.verdict), row.step_ratio_to_mha, row.madds_per_step);
  }
  html += "</table>\n";
  if (!r.notes.empty()) {
    html += "<h2>Notes</h2><ul>\n";
    for (const auto& n : r.notes)
      absl::StrAppend(&html, "<li>", EscapeXml(n), "</li>\n");
    html += "</ul>\n";
  }
  html += "</body></html>\n";
  return html;
}

}  // namespace lrkv
