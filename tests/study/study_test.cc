// The comparison study's pieces: option checks, the multiply-add model, the
// JSON round trip behind `lrkv report --html`, and the SVG plots; plus one
// small real study on stories260K (no healing) whose rows must be internally
// consistent.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "study/compare_html.h"
#include "study/compare_job.h"
#include "study/svg_plot.h"
#include "tests/kjv_text.h"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

using ::testing::HasSubstr;

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos;
       p = text.find(what, p + 1))
    ++n;
  return n;
}

TEST(Study, BadOptionsAreRefusedWithTheirName) {
  CompareJobOptions o;
  o.checkpoint = lrkv::testing::StoriesModelPath();
  o.eval = lrkv::testing::StoriesTextPath();
  o.work_dir = lrkv::testing::FreshTempDir("study_bad").string();
  auto expect = [&](CompareJobOptions bad, const std::string& phrase) {
    auto r = RunCompareJob(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << phrase;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(phrase));
  };
  CompareJobOptions b = o;
  b.budgets = {0};
  expect(b, "--budget 0 must lie in (0, 1]");
  b = o;
  b.variants = {"lrkv", "mha2"};
  expect(b, "'mha2' must be one of gqa, mqa, mla, lrkv");
  b = o;
  b.rope_modes = {"naive"};
  expect(b, "'naive' must be plane, reconstruct, partial or shared-plane");
  b = o;
  b.heal_steps = 5;
  expect(b, "--heal-steps needs --data");
  b = o;
  b.eval.clear();
  expect(b, "--eval");
}

TEST(Study, MultiplyAddsFollowEachDecodePath) {
  AttentionShape s;
  s.heads = 12;
  s.head_dim = 128;
  KvConfig mha;
  const int64_t L = 1000;
  EXPECT_EQ(DecodeMacsPerStep(s, mha, "expanded", L), 2 * 12 * L * 128);
  KvConfig lrkv;
  lrkv.variant = KvVariant::kLrkv;
  lrkv.rank = 51;
  const int64_t plane = DecodeMacsPerStep(s, lrkv, "plane", L);
  EXPECT_EQ(plane, 2 * L * 12 * (128 + 51) + 2 * 12 * 51 * 128);
  // Reconstruction rebuilds and rotates every cached key at every step.
  EXPECT_EQ(DecodeMacsPerStep(s, lrkv, "reconstruct", L) - plane,
            L * 12 * (51 * 128 + 2 * 128) + 12 * L * 128);
  KvConfig mla;
  mla.variant = KvVariant::kMla;
  mla.latent = 256;
  EXPECT_EQ(DecodeMacsPerStep(s, mla, "reconstruct", L),
            2 * L * 12 * 256 * 128 + 2 * 12 * L * 128);
}

TEST(Study, SvgPlotsDrawEverySeriesAndEscapeNames) {
  PlotOptions o;
  o.title = "a <b> & c";
  o.log_y = true;
  const std::string svg = RenderSvgPlot(
      o, {{"lrkv \"plane\"", {{25, 30}, {50, 14}, {75, 4.5}}},
          {"mla",
           {{25, 5.4}, {50, 3.7}, {75, 0}}},  // y = 0 cannot sit on a log axis
          {"source", {{100, 3.47}}, false, false}});
  EXPECT_EQ(Count(svg, "<svg"), 1);
  EXPECT_EQ(Count(svg, "<polyline"), 2);  // the markers-only series has none
  EXPECT_EQ(Count(svg, "class=\"marker\"") - 3, 3 + 2 + 1);  // 3 legend markers
  EXPECT_THAT(svg, HasSubstr("a &lt;b&gt; &amp; c"));
  EXPECT_THAT(svg, HasSubstr("lrkv &quot;plane&quot;"));
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

// The axes reach the ticks beyond every point and error bar (a source at perplexity
// 3.2 used to sit below the lowest tick, 5); points on one spot are spread apart;
// error bars, labels and hollow markers are drawn.
TEST(Study, SvgPlotsTickPastEveryPointAndSpreadCoincidentOnes) {
  PlotOptions o;
  o.log_y = true;
  PlotSeries a{"a", {{25, 40}, {50, 20}}};
  a.labels = {"r=0", "r=2"};
  a.y_error = {{30, 60}, {15, 25}};
  PlotSeries b{"b", {{25, 40}}};  // on a's first point
  b.marker = "square";
  b.hollow = true;
  PlotSeries source{"source", {{100, 3.2}}, false, false};
  source.marker = "diamond";
  const std::string svg = RenderSvgPlot(o, {a, b, source});
  // y ticks: the lowest at or below 3.2, the highest at or above 60.
  std::vector<double> ticks;
  const std::string tick = "text-anchor=\"end\">";
  for (size_t at = svg.find(tick); at != std::string::npos; at = svg.find(tick, at + 1)) {
    ticks.push_back(std::stod(svg.substr(at + tick.size())));
  }
  ASSERT_GE(ticks.size(), 2u);
  EXPECT_LE(*std::min_element(ticks.begin(), ticks.end()), 3.2);
  EXPECT_GE(*std::max_element(ticks.begin(), ticks.end()), 60.0);
  EXPECT_EQ(Count(svg, "class=\"error-bar\""), 2);
  EXPECT_EQ(Count(svg, "class=\"point-label\""), 2);
  EXPECT_EQ(Count(svg, "fill=\"white\" stroke="), 2);  // b hollow, in the plot and legend
  EXPECT_EQ(Count(svg, "<polygon class=\"marker\""), 2);  // the diamond and its legend
  // a's and b's first points were on one spot: drawn 7 px apart.
  const std::string circle = "<circle class=\"marker\" cx=\"";
  const std::string rect = "<rect class=\"marker\" x=\"";
  const size_t c_at = svg.find(circle), r_at = svg.find(rect);
  ASSERT_NE(c_at, std::string::npos);
  ASSERT_NE(r_at, std::string::npos);
  const double cx = std::stod(svg.substr(c_at + circle.size()));
  const double rx = std::stod(svg.substr(r_at + rect.size())) + 4.5;
  EXPECT_NEAR(std::abs(rx - cx), 7.0, 0.2);
}

// A real study, small: stories260K at one budget, GQA and LRKV plane, no
// healing.
TEST(Study, SmallStudyRowsAreConsistentAndRoundTrip) {
  CompareJobOptions o;
  o.checkpoint = lrkv::testing::StoriesModelPath();
  o.label = "stories260K";
  o.budgets = {0.5};
  o.variants = {"gqa", "lrkv"};
  o.rope_modes = {"plane"};
  o.eval = lrkv::testing::StoriesTextPath();
  o.eval_range = {0.9, 1.0};
  o.kl_tokens = 300;
  o.contexts = {16, 32};
  o.timed_tokens = 2;
  o.work_dir = lrkv::testing::FreshTempDir("study_small").string();
  auto r = RunCompareJob(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rows.size(), 2u);
  EXPECT_GT(r->source_perplexity, 1.0);
  for (const auto& row : r->rows) {
    SCOPED_TRACE(row.config);
    EXPECT_DOUBLE_EQ(row.cache_ratio, 0.5);
    EXPECT_GT(row.ppl_before,
              r->source_perplexity);          // conversion loses something
    EXPECT_FALSE(row.ppl_after.has_value());  // no healing asked for
    ASSERT_TRUE(row.kl_mean.has_value());
    EXPECT_GT(*row.kl_mean, 0.0);
    EXPECT_GT(row.step_ms, 0.0);
    EXPECT_GT(row.madds_per_step, 0);
  }
  EXPECT_EQ(r->rows[0].config, "gqa n_kv=2");
  EXPECT_EQ(r->rows[0].verdict, "n/a (dense cache)");
  EXPECT_EQ(r->rows[1].config, "lrkv r=2");
  EXPECT_EQ(r->rows[1].verdict, "EQUIVALENT");
  EXPECT_EQ(r->latency.size(), 2u * 3u);  // source + two rows, at two contexts
  auto back = CompareReportFromJson(r->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToTable(), r->ToTable());
  const std::string html = CompareReportHtml(*back, "test");
  EXPECT_EQ(Count(html, "<svg"), 3);
  EXPECT_THAT(html, HasSubstr("lrkv r=2"));
  // What the page says besides the plots: who wins per budget, each verdict's numbers,
  // the context of the step ratios, the run's configuration.
  EXPECT_THAT(html, HasSubstr("Budget 0.50: lowest perplexity"));
  EXPECT_THAT(html, HasSubstr(absl::StrFormat("step vs MHA at L = %d", 32)));
  EXPECT_THAT(html, HasSubstr("id=\"run-config\""));
  EXPECT_GT(r->rows[1].verify_bound, 0.0);
  EXPECT_LE(r->rows[1].verify_error, r->rows[1].verify_bound);
  for (const auto& l : r->latency) EXPECT_LE(l.min_ms, l.step_ms);
  // A row that was not equivalent is shown as such, with its numbers and bound.
  CompareReport bad = *back;
  bad.rows[1].verdict = "NOT EQUIVALENT";
  bad.rows[1].verify_error = 3e-3;
  bad.rows[1].verify_bound = 1e-4;
  const std::string bad_html = CompareReportHtml(bad, "test");
  EXPECT_THAT(bad_html, HasSubstr("<tr class=\"bad\">"));
  EXPECT_THAT(bad_html, HasSubstr("error 0.003 exceeds the error model's bound 0.0001"));
  EXPECT_EQ(CompareReportFromJson(nlohmann::json::object()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The study at equal bytes on kjv-d64 (d_h = 64, which holds 32-value blocks):
// the source and an LRKV plane row through bf16, q8 and q4 caches. Each point's
// bytes are its scheme's cached values at the storage's bits; the Pareto front
// holds exactly the undominated points; the summary judges each byte budget;
// the points survive the report's JSON.
TEST(Study, CachePointsAtEqualBytes) {
  const auto dir = lrkv::testing::FreshTempDir("study_cache_points");
  const std::string eval = (dir / "heldout.txt").string();
  {
    std::ofstream out(eval);
    for (const auto& p : lrkv::testing::RevelationPassages(6))
      out << p << "\n<|endoftext|>\n";
  }
  CompareJobOptions o;
  o.checkpoint = lrkv::testing::SharedPath("models/kjv-d64");
  o.budgets = {0.5};
  o.variants = {"lrkv"};
  o.rope_modes = {"plane"};
  o.eval = eval;
  o.kl_tokens = 200;
  o.contexts = {32};
  o.timed_tokens = 2;
  o.cache_dtypes = {kernels::CacheDType::kBF16, kernels::CacheDType::kQ8_0,
                    kernels::CacheDType::kQ4_0};
  o.work_dir = (dir / "work").string();
  auto r = RunCompareJob(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rows.size(), 1u);
  ASSERT_EQ(r->cache_points.size(), 6u);
  const double fractions[] = {1.0, 17.0 / 32, 9.0 / 32};  // 16, 8.5, 4.5 bits
  for (size_t i = 0; i < 6; ++i) {
    const CachePoint& p = r->cache_points[i];
    SCOPED_TRACE(p.label + " " + p.cache);
    const double scheme = i < 3 ? 1.0 : r->rows[0].cache_ratio;
    EXPECT_NEAR(p.bytes_fraction, scheme * fractions[i % 3], 1e-12);
    EXPECT_GT(p.perplexity, 1.0);
    // On the front exactly when no other point has at most its bytes and a
    // lower perplexity.
    bool dominated = false;
    for (const CachePoint& q : r->cache_points) {
      dominated =
          dominated || (&q != &p && q.bytes_per_token <= p.bytes_per_token &&
                        q.perplexity < p.perplexity);
    }
    EXPECT_EQ(p.pareto, !dominated);
  }
  EXPECT_EQ(r->cache_points[0].label, "source");
  // The source through its bf16 cache scores as the plain forward does, to
  // bf16 rounding; q4 moves perplexity more than q8.
  EXPECT_NEAR(r->cache_points[0].perplexity / r->source_perplexity, 1.0, 5e-3);
  const double q8 = std::abs(
      r->cache_points[1].perplexity / r->cache_points[0].perplexity - 1);
  const double q4 = std::abs(
      r->cache_points[2].perplexity / r->cache_points[0].perplexity - 1);
  EXPECT_LT(q8, q4);
  ASSERT_EQ(r->cache_summary.size(), 3u);
  EXPECT_THAT(r->cache_summary[0], HasSubstr("at <= 50.0%"));
  EXPECT_THAT(r->cache_summary[2], HasSubstr("at <= 12.5%"));
  auto back = CompareReportFromJson(r->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToTable(), r->ToTable());
  EXPECT_THAT(r->ToTable(), HasSubstr("at equal bytes"));
}

// Decoupled-RoPE MLA is compared without and with DeepSeek's latent norm: the
// "mla+norm" rows, at the same cache, fitted on the calibration text, verified
// equivalent to their expansion through the norm.
TEST(Study, DecoupledMlaRowsComeWithAndWithoutTheLatentNorm) {
  CompareJobOptions o;
  o.checkpoint = lrkv::testing::StoriesModelPath();
  o.label = "stories260K";
  o.budgets = {0.5};
  o.variants = {"mla"};
  o.rope_modes = {"partial"};
  o.calib = lrkv::testing::StoriesTextPath();
  o.calib_range = {0.0, 0.5};
  o.eval = lrkv::testing::StoriesTextPath();
  o.eval_range = {0.9, 1.0};
  o.kl_tokens = 300;
  o.contexts = {16};
  o.timed_tokens = 2;
  o.work_dir = lrkv::testing::FreshTempDir("study_mla_norm").string();
  auto r = RunCompareJob(o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->rows.size(), 3u);  // mla reconstruct, mla partial, mla+norm
  const CompareRow& plain = r->rows[1];
  const CompareRow& normed = r->rows[2];
  EXPECT_EQ(plain.variant, "mla");
  EXPECT_EQ(normed.variant, "mla+norm");
  EXPECT_EQ(normed.rope_mode, "partial");
  EXPECT_EQ(normed.config, "mla+norm d_c=24 d_rope=8");
  EXPECT_DOUBLE_EQ(normed.cache_ratio, plain.cache_ratio);
  EXPECT_EQ(normed.verdict, "EQUIVALENT");
  EXPECT_NE(normed.ppl_before, plain.ppl_before);  // another model
  EXPECT_THAT(r->ToTable(), HasSubstr("mla+norm d_c=24"));
}

}  // namespace
}  // namespace lrkv
