// The comparison study as HTML (see compare_html.h).
#include "study/compare_html.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "study/svg_plot.h"
#include "surgery/kv_variant.h"

namespace lrkv {
namespace {

// Whether a row's variant name is a pooled one (gqa, mqa): one series per
// variant, its RoPE untouched.
bool Pooled(const std::string& variant) {
  const absl::StatusOr<KvVariant> v = ParseKvVariant(variant);
  return v.ok() && KvVariantTypeOf(*v).pooled();
}

std::string SeriesName(const CompareRow& r) {
  return Pooled(r.variant) ? r.variant
                           : absl::StrCat(r.variant, " ", r.rope_mode);
}

double BestPerplexity(const CompareRow& r) {
  return r.ppl_after ? *r.ppl_after : r.ppl_before;
}

constexpr const char* kSourceName = "source (MHA)";

// "lrkv r=2" -> "r=2": the size a point in a family's line stands for.
std::string SizeLabel(const CompareRow& r) {
  const size_t space = r.config.find(' ');
  return space == std::string::npos ? r.config : r.config.substr(space + 1);
}

// The family of a latency row ("lrkv r=2", "plane" -> "lrkv plane").
std::string FamilyOf(const CompareLatency& l) {
  const std::string variant = l.config.substr(0, l.config.find(' '));
  return Pooled(variant) ? variant : absl::StrCat(variant, " ", l.rope_mode);
}

// Who wins: per budget, the lowest perplexity and the fastest decode step, and
// every factored engine that was not equivalent to its expansion, with its
// numbers.
std::string SummaryHtml(const CompareReport& r, int64_t context) {
  std::map<double, std::vector<const CompareRow*>> by_budget;
  for (const auto& row : r.rows) by_budget[row.budget].push_back(&row);
  std::string out = "<h2>Summary</h2>\n<ul class=\"summary\">\n";
  for (const auto& [budget, rows] : by_budget) {
    const CompareRow* best = rows.front();
    const CompareRow* fastest = rows.front();
    for (const CompareRow* row : rows) {
      if (BestPerplexity(*row) < BestPerplexity(*best)) best = row;
      if (row->step_ratio_to_mha < fastest->step_ratio_to_mha) fastest = row;
    }
    absl::StrAppendFormat(
        &out,
        "<li>Budget %.2f: lowest perplexity <b>%s %s</b> (%.3f%s, source "
        "%.3f); fastest "
        "decode <b>%s %s</b> (%.2f&times; the source's step at L = %d).</li>\n",
        budget, EscapeXml(best->config), EscapeXml(best->rope_mode),
        BestPerplexity(*best), best->ppl_after ? " after healing" : "",
        r.source_perplexity, EscapeXml(fastest->config),
        EscapeXml(fastest->rope_mode), fastest->step_ratio_to_mha, context);
  }
  int not_equivalent = 0;
  for (const auto& row : r.rows) {
    if (row.verdict != "NOT EQUIVALENT") continue;
    ++not_equivalent;
    absl::StrAppendFormat(
        &out,
        "<li class=\"bad\"><b>NOT EQUIVALENT: %s %s</b> at budget %.2f: the "
        "fp32 factored engine's error %.3g exceeds the error model's bound "
        "%.3g (%.2f&times; it).</li>\n",
        EscapeXml(row.config), EscapeXml(row.rope_mode), row.budget,
        row.verify_error, row.verify_bound,
        row.verify_bound > 0 ? row.verify_error / row.verify_bound : 0.0);
  }
  if (not_equivalent == 0) {
    out +=
        "<li>Every factored engine decoded as its expansion does (EQUIVALENT, "
        "or n/a for "
        "dense caches).</li>\n";
  }
  return out + "</ul>\n";
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
      if (x.contains("heal_kept_step"))
        row.heal_kept_step = x["heal_kept_step"].get<int64_t>();
      row.verdict = x.at("verdict").get<std::string>();
      row.verify_error = x.value("verify_error", 0.0);
      row.verify_bound = x.value("verify_bound", 0.0);
      row.step_context = x.value("step_context", int64_t{0});
      row.step_ms = x.at("step_ms").get<double>();
      row.step_ratio_to_mha = x.at("step_ratio_to_mha").get<double>();
      row.madds_per_step =
          x.at("attention_madds_per_step_layer").get<int64_t>();
      r.rows.push_back(row);
    }
    for (const auto& x : j.at("latency")) {
      const double ms = x.at("step_ms").get<double>();
      r.latency.push_back({r.model, x.at("config").get<std::string>(),
                           x.at("rope_mode").get<std::string>(),
                           x.at("context").get<int64_t>(), ms,
                           x.at("ratio_to_mha").get<double>(),
                           x.value("min_ms", ms), x.value("max_ms", ms)});
    }
    for (const auto& n : j.at("notes")) r.notes.push_back(n.get<std::string>());
    if (j.contains("run_config")) r.run_config = j["run_config"];
    r.cache_points =
        CachePointsFromJson(j.value("cache_points", nlohmann::json::array()));
    for (const auto& line : j.value("cache_summary", nlohmann::json::array()))
      r.cache_summary.push_back(line.get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a comparison report: ", e.what()));
  }
  return r;
}

namespace {

// One colour per variant family in every plot (a fixed order, so that reports
// compare at a glance; families first seen later take the next colours); the
// source is black.
class Palette {
 public:
  int Of(const std::string& family) {
    auto it = colors_.find(family);
    if (it != colors_.end()) return it->second;
    const int next = static_cast<int>(colors_.size()) + 2;
    colors_[family] = next;
    return next;
  }

 private:
  std::map<std::string, int> colors_ = {{"gqa", 0},
                                        {"lrkv plane", 1},
                                        {"lrkv reconstruct", 2},
                                        {"mla reconstruct", 3},
                                        {"mqa", 4},
                                        {kSourceName, 6}};
};

PlotSeries SourceSeries(const CompareReport& r, Palette& palette) {
  PlotSeries source{kSourceName,
                    {{100.0, r.source_perplexity}},
                    false,
                    false,
                    palette.Of(kSourceName)};
  source.marker = "diamond";
  source.labels = {"source"};
  return source;
}

// 1. Perplexity against cache size: converted (hollow squares, dashed) and
// healed (filled circles, solid) per family, each point labelled with its size.
std::string QualityPlot(const CompareReport& r, Palette& palette, bool healed) {
  const PlotSeries source = SourceSeries(r, palette);
  std::map<std::string, PlotSeries> before, after;
  for (const auto& row : r.rows) {
    const std::string family = SeriesName(row);
    PlotSeries& b = before[family];
    b.name = family + (healed ? " converted" : "");
    b.dashed = true;
    b.marker = "square";
    b.hollow = true;
    b.color = palette.Of(family);
    b.points.push_back({100 * row.cache_ratio, row.ppl_before});
    b.labels.push_back(SizeLabel(row));
    if (row.ppl_after) {
      PlotSeries& h = after[family];
      h.name = family + " healed";
      h.color = palette.Of(family);
      h.points.push_back({100 * row.cache_ratio, *row.ppl_after});
      h.labels.push_back(SizeLabel(row));
    }
  }
  std::vector<PlotSeries> quality;
  for (auto& [family, s] : after) quality.push_back(s);
  for (auto& [family, s] : before) quality.push_back(s);
  quality.push_back(source);
  PlotOptions q;
  q.title = absl::StrCat(
      r.model, ": perplexity vs KV-cache size (lower-left is better)");
  q.x_label = "KV cache (% of the source model's)";
  q.y_label = "held-out perplexity (log scale)";
  q.log_y = true;
  q.width = 1000;
  q.height = 460;
  return RenderSvgPlot(q, quality);
}

// 2. Perplexity against decode step time: one line per family across budgets,
// each point labelled with its budget; healed points filled, unhealed hollow.
std::string TradeoffPlot(const CompareReport& r, Palette& palette, bool healed,
                         int64_t context) {
  std::map<std::string, PlotSeries> trade;
  for (const auto& row : r.rows) {
    const std::string family = SeriesName(row);
    PlotSeries& t = trade[family];
    t.name = family;
    t.color = palette.Of(family);
    t.marker = row.ppl_after ? "circle" : "square";
    t.hollow = !row.ppl_after;
    t.points.push_back({row.step_ratio_to_mha, BestPerplexity(row)});
    t.labels.push_back(absl::StrFormat("b=%.2f", row.budget));
  }
  std::vector<PlotSeries> trade_series;
  for (auto& [family, s] : trade) trade_series.push_back(s);
  PlotSeries source_step = SourceSeries(r, palette);
  source_step.points = {{1.0, r.source_perplexity}};
  trade_series.push_back(source_step);
  PlotOptions t;
  t.title = absl::StrCat("perplexity vs decode step time at L = ", context,
                         " tokens (each point one budget)");
  t.x_label =
      absl::StrCat("whole-model decode step / the source's at L = ", context,
                   " (lower is faster)");
  t.y_label = absl::StrCat("perplexity", healed ? ", after healing" : "",
                           " (log scale)");
  t.log_y = true;
  t.width = 1000;
  t.height = 460;
  return RenderSvgPlot(t, trade_series);
}

// 3. Decode step time against context length: the median step, with the fastest
// and slowest timed step as an error bar; configs of one family share its
// colour and differ in marker.
std::string LatencyPlot(const CompareReport& r, Palette& palette) {
  const char* kShapes[] = {"circle", "square", "triangle", "diamond"};
  std::map<std::string, PlotSeries> lat;
  std::map<std::string, int> shapes_used;
  for (const auto& l : r.latency) {
    const std::string name = absl::StrCat(l.config, " ", l.rope_mode);
    const std::string family =
        l.config == "mha (source)" ? kSourceName : FamilyOf(l);
    PlotSeries& s = lat[name];
    if (s.points.empty()) {
      s.name = name;
      s.color = palette.Of(family);
      s.marker = kShapes[shapes_used[family]++ % 4];
    }
    s.points.push_back({static_cast<double>(l.context), l.step_ms});
    s.y_error.push_back({l.min_ms, l.max_ms});
  }
  std::vector<PlotSeries> lat_series;
  for (auto& [name, s] : lat) lat_series.push_back(s);
  PlotOptions c;
  c.title = "decode step latency vs context length (whole model, this machine)";
  c.x_label = "tokens in the cache (log scale)";
  c.y_label =
      "ms per decode step: median, bar = fastest to slowest (log scale)";
  c.log_x = c.log_y = true;
  c.width = 1000;
  c.height = 520;
  return RenderSvgPlot(c, lat_series);
}

// The rows as a table, a row that failed verification marked.
std::string RowsTableHtml(const CompareReport& r, int64_t context) {
  std::string html = absl::StrFormat(
      "<h2>Rows</h2>\n<table id=\"rows\"><tr><th>budget</th><th "
      "class=\"l\">config</th>"
      "<th class=\"l\">RoPE</th><th>cache vs source</th><th>K/V "
      "params/layer</th>"
      "<th>ppl converted</th><th>ppl healed (kept step)</th><th>KL to "
      "source</th>"
      "<th class=\"l\">verification (fp32 error vs bound)</th><th>step vs MHA "
      "at L = %d</th>"
      "<th>attention MACs/step/layer</th></tr>\n",
      context);
  for (const auto& row : r.rows) {
    const bool bad = row.verdict == "NOT EQUIVALENT";
    std::string verdict = EscapeXml(row.verdict);
    if (row.verify_bound > 0) {
      absl::StrAppendFormat(
          &verdict, " <span class=\"small\">(%.3g %s %.3g)</span>",
          row.verify_error, bad ? "&gt;" : "&le;", row.verify_bound);
    }
    absl::StrAppendFormat(
        &html,
        "<tr%s><td>%.2f</td><td class=\"l\">%s</td><td "
        "class=\"l\">%s</td><td>%.1f%%</td>"
        "<td>%d</td><td>%.3f</td><td>%s</td><td>%s</td><td "
        "class=\"l%s\">%s</td>"
        "<td>%.2f&times;</td><td>%d</td></tr>\n",
        bad ? " class=\"bad\"" : "", row.budget, EscapeXml(row.config),
        EscapeXml(row.rope_mode), 100 * row.cache_ratio, row.kv_params,
        row.ppl_before,
        row.ppl_after
            ? absl::StrCat(absl::StrFormat("%.3f", *row.ppl_after),
                           row.heal_kept_step
                               ? absl::StrCat(" <span class=\"small\">(step ",
                                              *row.heal_kept_step, ")</span>")
                               : "")
            : "&ndash;",
        row.kl_mean ? absl::StrFormat("%.3f", *row.kl_mean) : "&ndash;",
        bad ? " bad" : "", verdict, row.step_ratio_to_mha, row.madds_per_step);
  }
  return html + "</table>\n";
}

// The study's notes and its run configuration.
std::string NotesAndConfigHtml(const CompareReport& r) {
  std::string html;
  if (!r.notes.empty()) {
    html += "<h2>Notes</h2><ul>\n";
    for (const auto& n : r.notes)
      absl::StrAppend(&html, "<li>", EscapeXml(n), "</li>\n");
    html += "</ul>\n";
  }
  if (!r.run_config.empty()) {
    html +=
        "<h2>Run configuration</h2>\n<table class=\"config\" "
        "id=\"run-config\">\n";
    for (const auto& [key, value] : r.run_config.items()) {
      const std::string text =
          value.is_string() ? value.get<std::string>() : value.dump();
      absl::StrAppend(&html, "<tr><th class=\"l\">", EscapeXml(key),
                      "</th><td class=\"l\">", EscapeXml(text), "</td></tr>\n");
    }
    html += "</table>\n";
  }
  return html;
}

}  // namespace

std::string CompareReportHtml(const CompareReport& r,
                              const std::string& provenance) {
  Palette palette;
  const bool healed =
      std::any_of(r.rows.begin(), r.rows.end(),
                  [](const CompareRow& row) { return row.ppl_after; });
  const int64_t context = r.rows.empty() ? 0 : r.rows.back().step_context;
  // In this order: families take their colours as the plots first meet them.
  const std::string quality = QualityPlot(r, palette, healed);
  const std::string tradeoff = TradeoffPlot(r, palette, healed, context);
  const std::string latency = LatencyPlot(r, palette);
  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, "
      "initial-scale=1\">\n"
      "<title>lrkv comparison: ",
      EscapeXml(r.model),
      "</title>\n<style>body{font-family:sans-serif;margin:1.5em 2%;color:#222}"
      "table{border-collapse:collapse;font-size:13px;width:100%}"
      "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}"
      "td.l,th.l{text-align:left}tr.bad "
      "td{background:#fde2e2}td.bad{color:#b00020;"
      "font-weight:bold}figure{margin:1.5em 0;max-width:1400px}"
      ".summary li{margin:.3em 0}.small{color:#555;font-size:12px}"
      "table.config{width:auto}</style></head><body>\n"
      "<h1>Variants at equal KV-cache budget: ",
      EscapeXml(r.model), "</h1>\n<p>", EscapeXml(provenance), "</p>\n",
      absl::StrFormat("<p>Source perplexity %.4f on %d held-out tokens.</p>\n",
                      r.source_perplexity, r.eval_tokens));
  absl::StrAppend(&html, SummaryHtml(r, context));
  absl::StrAppend(&html, "<figure id=\"quality\">", quality, "</figure>\n",
                  "<figure id=\"tradeoff\">", tradeoff, "</figure>\n",
                  "<figure id=\"latency\">", latency, "</figure>\n");
  absl::StrAppend(&html, RowsTableHtml(r, context), NotesAndConfigHtml(r),
                  "</body></html>\n");
  return html;
}

}  // namespace lrkv
