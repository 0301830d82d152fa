// Verification reports as JSON, JUnit XML and a table (see verify_report.h).
#include "verify/verify_report.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace lrkv {
namespace {

nlohmann::json StatsJson(const ErrorStats& e) {
  return {
      {"max_abs", e.max_abs}, {"max_rel", e.max_rel}, {"cos_dist", e.cos_dist}};
}

std::string SiteName(int64_t layer) {
  return layer < 0 ? std::string("logits") : absl::StrCat("layer ", layer);
}

std::string Divergence(const EquivalenceResult& e) {
  if (e.first_bad_step < 0) return "none";
  if (e.non_finite) {
    return absl::StrFormat("step %d, %s: a non-finite value (NaN/Inf)",
                           e.first_bad_step, SiteName(e.first_bad_layer));
  }
  return absl::StrFormat("step %d, %s, error %.3g", e.first_bad_step,
                         SiteName(e.first_bad_layer), e.first_bad_error);
}

std::string CacheMessage(const CacheCheck& c) {
  return absl::StrFormat(
      "%s engine (%s) after %d tokens: %d bytes used, %d allocated; "
      "formula %d bytes",
      c.engine, c.variant, c.tokens, c.used_bytes, c.allocated_bytes,
      c.formula_bytes);
}

}  // namespace

std::string XmlEscape(const std::string& s) {
  return absl::StrReplaceAll(s, {{"&", "&amp;"},
                                 {"<", "&lt;"},
                                 {">", "&gt;"},
                                 {"\"", "&quot;"},
                                 {"'", "&apos;"}});
}

std::string EquivalenceVerdict(const EquivalenceResult& e) {
  if (!e.applicable) return "n/a";
  if (!e.expected_equivalent) {
    return e.equivalent ? "expected NOT EQUIVALENT: it was EQUIVALENT"
                        : "expected NOT EQUIVALENT: confirmed";
  }
  return e.equivalent ? "EQUIVALENT" : "NOT EQUIVALENT";
}

std::string DescribeEquivalence(const EquivalenceResult& e) {
  return absl::StrFormat(
      "%s decoding (%s cache) is %s: at %s its RMS error vs float64 is %.3g, "
      "the "
      "reference error (plain expanded %s engine, or the algorithm's own "
      "rounding) %.3g, "
      "bound %.3g (ratio %.3g, passes at <= 1); greedy tokens agreed %d/%d (%d "
      "ties); "
      "first divergence: %s; rule: %s",
      e.mode, e.dtype, EquivalenceVerdict(e), SiteName(e.worst_site),
      e.candidate_error, e.dtype, e.reference_error, e.bound, e.ratio,
      e.tokens_agreed, e.decode_tokens, e.tokens_tied, Divergence(e), e.rule);
}

bool VerifyReport::passed() const {
  for (const auto& e : equivalence) {
    if (!e.passed()) return false;
  }
  for (const auto& c : cache) {
    if (!c.passed()) return false;
  }
  for (const auto& g : gates) {
    if (!g.passed()) return false;
  }
  return true;
}

std::string DescribeGate(const QualityGate& g) {
  if (std::isnan(g.measured)) {
    return absl::StrCat(g.measure, " not measured; the gate ",
                        g.at_most ? "<= " : ">= ", g.bound, " fails");
  }
  return absl::StrFormat("%s %.6g %s %.6g: %s", g.measure, g.measured,
                         g.at_most ? "<=" : ">=", g.bound,
                         g.passed() ? "pass" : "FAIL");
}

nlohmann::json VerifyReport::ToJson() const {
  nlohmann::json eq = nlohmann::json::array();
  for (const auto& e : equivalence) {
    nlohmann::json j = {{"mode", e.mode},
                        {"dtype", e.dtype},
                        {"applicable", e.applicable},
                        {"verdict", EquivalenceVerdict(e)},
                        {"expected_equivalent", e.expected_equivalent},
                        {"required", e.required},
                        {"passed", e.passed()}};
    if (!e.applicable) {
      j["reason"] = e.reason;
    } else {
      j["reference"] = e.reference;
      j["plain"] = e.plain;
      j["rule"] = e.rule;
      j["cache_layout"] = e.cache_layout;
      j["worst_site"] = SiteName(e.worst_site);
      j["worst_site_layer"] = e.worst_site;
      j["equivalent"] = e.equivalent;
      j["candidate_error"] = e.candidate_error;
      j["reference_error"] = e.reference_error;
      j["bound"] = e.bound;
      j["ratio"] = e.ratio;
      j["non_finite"] = e.non_finite;
      j["greedy_ties"] = e.tokens_tied;
      j["worst_layer"] = StatsJson(e.worst_layer);
      j["worst_logits"] = StatsJson(e.worst_logits);
      j["steps"] = e.steps;
      j["greedy_tokens"] = e.decode_tokens;
      j["greedy_tokens_agreed"] = e.tokens_agreed;
      if (e.first_bad_step >= 0) {
        j["first_divergence"] = {{"step", e.first_bad_step},
                                 {"layer", e.first_bad_layer},
                                 {"error", e.first_bad_error}};
      }
    }
    eq.push_back(j);
  }
  nlohmann::json cache_json = nlohmann::json::array();
  for (const auto& c : cache) {
    cache_json.push_back({{"engine", c.engine},
                          {"variant", c.variant},
                          {"tokens", c.tokens},
                          {"used_bytes", c.used_bytes},
                          {"allocated_bytes", c.allocated_bytes},
                          {"formula_bytes", c.formula_bytes},
                          {"passed", c.passed()}});
  }
  nlohmann::json j = {{"checkpoint", checkpoint},
                      {"variant", variant},
                      {"passed", passed()},
                      {"equivalence", eq},
                      {"cache", cache_json}};
  if (!source.empty()) j["source"] = source;
  if (!fidelity_skipped.empty()) j["fidelity_skipped"] = fidelity_skipped;
  if (fidelity) {
    j["fidelity"] = {{"documents", fidelity->documents},
                     {"tokens", fidelity->tokens},
                     {"kl_mean", fidelity->kl_mean},
                     {"kl_max", fidelity->kl_max},
                     {"top1_agreement", fidelity->top1_agreement},
                     {"source_perplexity", fidelity->source_perplexity},
                     {"converted_perplexity", fidelity->converted_perplexity},
                     {"perplexity_change", fidelity->converted_perplexity -
                                               fidelity->source_perplexity}};
  }
  if (!gates.empty()) {
    nlohmann::json gj = nlohmann::json::array();
    for (const auto& g : gates) {
      gj.push_back(
          {{"option", g.option},
           {"measure", g.measure},
           {"measured", std::isnan(g.measured) ? nlohmann::json(nullptr)
                                               : nlohmann::json(g.measured)},
           {"bound", g.bound},
           {"at_most", g.at_most},
           {"passed", g.passed()}});
    }
    j["gates"] = gj;
  }
  if (diversity) {
    j["head_diversity"] = {
        {"heads", diversity->heads},
        {"bound", diversity->heads - 1},
        {"converted_centred", diversity->converted_centred},
        {"converted_uncentred", diversity->converted_uncentred}};
    if (diversity->has_source) {
      j["head_diversity"]["source_centred"] = diversity->source_centred;
      j["head_diversity"]["source_uncentred"] = diversity->source_uncentred;
    }
  }
  return j;
}

std::string VerifyReport::ToJUnit() const {
  int tests = 0, failures = 0, skipped = 0;
  std::string cases;
  for (const auto& e : equivalence) {
    ++tests;
    absl::StrAppend(&cases,
                    "    <testcase classname=\"lrkv.equivalence\" name=\"",
                    XmlEscape(e.mode + " " + e.dtype), "\">\n");
    if (!e.applicable && e.required) {
      ++failures;
      absl::StrAppend(
          &cases, "      <failure message=\"",
          XmlEscape(e.mode + " was required but does not apply: " + e.reason),
          "\"/>\n");
    } else if (!e.applicable) {
      ++skipped;
      absl::StrAppend(&cases, "      <skipped message=\"", XmlEscape(e.reason),
                      "\"/>\n");
    } else if (!e.passed()) {
      ++failures;
      absl::StrAppend(&cases, "      <failure message=\"",
                      XmlEscape(DescribeEquivalence(e)), "\"/>\n");
    } else {
      absl::StrAppend(&cases, "      <system-out>",
                      XmlEscape(DescribeEquivalence(e)), "</system-out>\n");
    }
    absl::StrAppend(&cases, "    </testcase>\n");
  }
  for (const auto& c : cache) {
    ++tests;
    absl::StrAppend(
        &cases, "    <testcase classname=\"lrkv.cache\" name=\"",
        XmlEscape(c.engine + " " + std::to_string(c.tokens) + " tokens"),
        "\">\n");
    if (!c.passed()) {
      ++failures;
      absl::StrAppend(&cases, "      <failure message=\"",
                      XmlEscape(CacheMessage(c)), "\"/>\n");
    } else {
      absl::StrAppend(&cases, "      <system-out>", XmlEscape(CacheMessage(c)),
                      "</system-out>\n");
    }
    absl::StrAppend(&cases, "    </testcase>\n");
  }
  for (const auto& g : gates) {
    ++tests;
    absl::StrAppend(&cases, "    <testcase classname=\"lrkv.quality\" name=\"",
                    XmlEscape(g.option), "\">\n");
    if (!g.passed()) ++failures;
    absl::StrAppend(
        &cases, g.passed() ? "      <system-out>" : "      <failure message=\"",
        XmlEscape(DescribeGate(g)), g.passed() ? "</system-out>\n" : "\"/>\n");
    absl::StrAppend(&cases, "    </testcase>\n");
  }
  return absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
                      "<testsuites>\n  <testsuite name=\"lrkv verify ",
                      XmlEscape(checkpoint), "\" tests=\"", tests,
                      "\" failures=\"", failures, "\" skipped=\"", skipped,
                      "\">\n", cases, "  </testsuite>\n</testsuites>\n");
}

absl::StatusOr<VerifyReport> VerifyReportFromJson(const nlohmann::json& j) {
  VerifyReport r;
  auto stats = [](const nlohmann::json& s) {
    return ErrorStats{s.value("max_abs", 0.0), s.value("max_rel", 0.0),
                      s.value("cos_dist", 0.0)};
  };
  try {
    r.checkpoint = j.at("checkpoint").get<std::string>();
    r.variant = j.at("variant").get<std::string>();
    r.source = j.value("source", std::string());
    r.fidelity_skipped = j.value("fidelity_skipped", std::string());
    for (const auto& x : j.at("equivalence")) {
      EquivalenceResult e;
      e.mode = x.at("mode").get<std::string>();
      e.dtype = x.at("dtype").get<std::string>();
      e.applicable = x.at("applicable").get<bool>();
      e.expected_equivalent = x.at("expected_equivalent").get<bool>();
      e.required = x.value("required", false);
      e.reason = x.value("reason", std::string());
      if (e.applicable) {
        e.reference = x.value("reference", std::string());
        e.plain = x.value("plain", std::string());
        e.rule = x.value("rule", std::string());
        e.cache_layout = x.value("cache_layout", std::string());
        e.worst_site = x.value("worst_site_layer", int64_t{-1});
        e.candidate_error = x.at("candidate_error").get<double>();
        e.reference_error = x.at("reference_error").get<double>();
        e.bound = x.at("bound").get<double>();
        e.ratio = x.at("ratio").get<double>();
        e.non_finite = x.value("non_finite", false);
        e.tokens_tied = x.value("greedy_ties", int64_t{0});
        e.worst_layer = stats(x.value("worst_layer", nlohmann::json::object()));
        e.worst_logits =
            stats(x.value("worst_logits", nlohmann::json::object()));
        e.steps = x.value("steps", int64_t{0});
        e.decode_tokens = x.value("greedy_tokens", int64_t{0});
        e.tokens_agreed = x.value("greedy_tokens_agreed", int64_t{0});
        // Older reports lack "equivalent": the verdict says it.
        e.equivalent = x.contains("equivalent")
                           ? x["equivalent"].get<bool>()
                           : x.at("verdict").get<std::string>().find(
                                 "NOT EQUIVALENT") == std::string::npos;
        if (x.contains("first_divergence")) {
          const auto& d = x["first_divergence"];
          e.first_bad_step = d.at("step").get<int64_t>();
          e.first_bad_layer = d.at("layer").get<int64_t>();
          e.first_bad_error = d.at("error").get<double>();
        }
      }
      r.equivalence.push_back(e);
    }
    for (const auto& x : j.at("cache")) {
      CacheCheck c;
      c.engine = x.at("engine").get<std::string>();
      c.variant = x.at("variant").get<std::string>();
      c.tokens = x.at("tokens").get<int64_t>();
      c.used_bytes = x.at("used_bytes").get<int64_t>();
      c.allocated_bytes = x.at("allocated_bytes").get<int64_t>();
      c.formula_bytes = x.at("formula_bytes").get<int64_t>();
      r.cache.push_back(c);
    }
    if (j.contains("fidelity")) {
      const auto& f = j["fidelity"];
      r.fidelity = FidelityResult{f.at("documents").get<int64_t>(),
                                  f.at("tokens").get<int64_t>(),
                                  f.at("kl_mean").get<double>(),
                                  f.at("kl_max").get<double>(),
                                  f.at("top1_agreement").get<double>(),
                                  f.at("source_perplexity").get<double>(),
                                  f.at("converted_perplexity").get<double>()};
    }
    for (const auto& g : j.value("gates", nlohmann::json::array())) {
      const nlohmann::json& measured = g.at("measured");
      r.gates.push_back(
          {g.at("option").get<std::string>(),
           g.at("measure").get<std::string>(),
           measured.is_null() ? std::nan("") : measured.get<double>(),
           g.at("bound").get<double>(), g.at("at_most").get<bool>()});
    }
    if (j.contains("head_diversity")) {
      const auto& d = j["head_diversity"];
      DiversityResult div;
      div.heads = d.at("heads").get<int64_t>();
      div.converted_centred = d.at("converted_centred").get<double>();
      div.converted_uncentred = d.at("converted_uncentred").get<double>();
      div.has_source = d.contains("source_centred");
      div.source_centred = d.value("source_centred", 0.0);
      div.source_uncentred = d.value("source_uncentred", 0.0);
      r.diversity = div;
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a verification report: ", e.what()));
  }
  return r;
}

std::string VerifyReport::ToTable() const {
  std::string out =
      absl::StrFormat("checkpoint %s (%s)\n\n", checkpoint, variant);
  absl::StrAppend(
      &out,
      "mode         dtype  verdict             error vs f64  ref err     "
      "bound     ratio   tokens  check\n");
  for (const auto& e : equivalence) {
    if (!e.applicable) {
      absl::StrAppendFormat(&out, "%-12s %-6s n/a (%s)%s\n", e.mode, e.dtype,
                            e.reason, e.required ? ": required, FAIL" : "");
      continue;
    }
    absl::StrAppendFormat(
        &out, "%-12s %-6s %-19s %11.3g %10.3g %9.3g %9.3g %5d/%-3d %s\n",
        e.mode, e.dtype,
        e.expected_equivalent ? EquivalenceVerdict(e) : "control",
        e.candidate_error, e.reference_error, e.bound, e.ratio, e.tokens_agreed,
        e.decode_tokens, e.passed() ? "pass" : "FAIL");
    if (!e.expected_equivalent) {
      absl::StrAppendFormat(&out, "             %s\n", EquivalenceVerdict(e));
    }
    if (e.first_bad_step >= 0) {
      absl::StrAppendFormat(&out, "             first divergence: %s\n",
                            Divergence(e));
    }
    if (e.tokens_tied > 0) {
      absl::StrAppendFormat(
          &out, "             %d greedy ties within the logits bound\n",
          e.tokens_tied);
    }
  }
  for (const auto& e : equivalence) {
    if (!e.applicable) continue;
    absl::StrAppend(
        &out,
        "errors: RMS at the worst site, relative to the RMS of the f64 values "
        "there; ref err: the larger of the plain expanded engine's and the "
        "candidate algorithm's own fp32 rounding; rule: ",
        e.rule, "\n");
    break;
  }
  absl::StrAppend(
      &out,
      "\ncache engine  variant        tokens   used bytes   formula  check\n");
  for (const auto& c : cache) {
    absl::StrAppendFormat(&out, "%-13s %-14s %6d %12d %9d  %s\n", c.engine,
                          c.variant, c.tokens, c.used_bytes, c.formula_bytes,
                          c.passed() ? "pass" : "FAIL");
  }
  if (!fidelity_skipped.empty()) {
    absl::StrAppendFormat(&out, "\nfidelity vs %s: not measured: %s\n", source,
                          fidelity_skipped);
  }
  if (fidelity) {
    absl::StrAppendFormat(
        &out,
        "\nfidelity vs %s (%d tokens)\n  KL(source||converted) mean %.5f max "
        "%.4f nats\n"
        "  top-1 agreement %.2f%%\n  perplexity %.4f -> %.4f (%+.4f)\n",
        source, fidelity->tokens, fidelity->kl_mean, fidelity->kl_max,
        100 * fidelity->top1_agreement, fidelity->source_perplexity,
        fidelity->converted_perplexity,
        fidelity->converted_perplexity - fidelity->source_perplexity);
  }
  if (diversity) {
    absl::StrAppendFormat(&out,
                          "\nhead diversity (effective rank, bound H-1 = %d)\n",
                          diversity->heads - 1);
    if (diversity->has_source) {
      absl::StrAppendFormat(&out, "  source     centred %.3f  uncentred %.3f\n",
                            diversity->source_centred,
                            diversity->source_uncentred);
    }
    absl::StrAppendFormat(&out, "  converted  centred %.3f  uncentred %.3f\n",
                          diversity->converted_centred,
                          diversity->converted_uncentred);
  }
  if (!gates.empty()) absl::StrAppend(&out, "\nquality gates\n");
  for (const auto& g : gates)
    absl::StrAppend(&out, "  ", DescribeGate(g), "\n");
  absl::StrAppendFormat(&out, "\nverdict: %s\n", passed() ? "PASS" : "FAIL");
  return out;
}

}  // namespace lrkv
