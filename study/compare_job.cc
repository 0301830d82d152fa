// The comparison study (see compare_job.h).
#include "study/compare_job.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "formats/text_corpus.h"
#include "kernels/cache_dtype_option.h"
#include "model/checkpoint.h"
#include "runtime/generate_bench.h"
#include "runtime/language_model.h"
#include "surgery/conversion_options.h"
#include "surgery/kv_variant.h"
#include "train/heal_job.h"
#include "verify/verify_job.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;

absl::Status Invalid(const std::string& m) {
  return absl::InvalidArgumentError(m);
}

// A plan's RoPE mode from its (validated) name, which is the RoPE mode's own;
// the dense plans' "expanded" converts with exact RoPE.
RopeMode RopeModeOf(const std::string& mode) {
  return ParseRopeMode(mode).value_or(RopeMode::kReconstruct);
}

// One conversion to run: a variant at a budget with its RoPE handling.
struct Plan {
  double budget = 0;
  KvVariant variant = KvVariant::kLrkv;
  std::string rope_mode;  // reconstruct | plane | partial (LRKV), reconstruct |
                          // partial (MLA, decoupled RoPE), expanded (dense)
  KvConfig target;
  // MLA with decoupled RoPE and DeepSeek's latent norm (the rows "mla+norm").
  bool latent_norm = false;
};

// The variant as the study's rows name it.
std::string RowVariant(const Plan& p) {
  return p.latent_norm ? "mla+norm" : KvVariantName(p.variant);
}

// A row's config ("mla d_c=24 d_rope=8"), led by its variant's row name
// ("mla+norm d_c=24 d_rope=8"), which the plots group families by.
std::string RowConfig(const Plan& p, const KvConfig& target) {
  const std::string config = target.ToString();
  if (!p.latent_norm) return config;
  const size_t space = config.find(' ');
  return RowVariant(p) +
         (space == std::string::npos ? "" : config.substr(space));
}

absl::Status Validate(const CompareJobOptions& o) {
  if (o.checkpoint.empty()) return Invalid("--checkpoint is required");
  if (o.eval.empty()) return Invalid("--eval (held-out text) is required");
  if (o.work_dir.empty())
    return Invalid("a work folder is required (--work-dir)");
  if (o.budgets.empty()) return Invalid("--budget needs at least one value");
  for (double b : o.budgets) {
    if (!(b > 0 && b <= 1))
      return Invalid(absl::StrCat("--budget ", b, " must lie in (0, 1]"));
  }
  if (o.variants.empty())
    return Invalid("--variants needs at least one of gqa, mqa, mla, lrkv");
  for (const auto& v : o.variants) {
    const absl::StatusOr<KvVariant> variant = ParseKvVariant(v);
    if (!variant.ok() || KvVariantName(*variant) != v ||
        !KvVariantTypeOf(*variant).convertible()) {
      return Invalid(absl::StrCat("--variants: '", v, "' must be one of ",
                                  ConvertibleVariantNames()));
    }
  }
  for (const auto& m : o.rope_modes) {
    const absl::StatusOr<RopeMode> mode = ParseRopeMode(m);
    if (!mode.ok() || RopeModeName(*mode) != m) {
      return Invalid(absl::StrCat(
          "--rope-mode: '", m,
          "' must be plane, reconstruct, partial or shared-plane"));
    }
  }
  if (o.heal_steps < 0 || o.heal_steps > 1000000) {
    return Invalid(absl::StrCat("--heal-steps ", o.heal_steps,
                                " must lie in [0, 1000000]"));
  }
  if (o.heal_steps > 0 && o.data.empty())
    return Invalid("--heal-steps needs --data");
  if (o.contexts.empty()) return Invalid("--context needs at least one length");
  for (int64_t l : o.contexts) {
    if (l < 1 || l > 65536)
      return Invalid(absl::StrCat("--context ", l, " must lie in [1, 65536]"));
  }
  if (o.timed_tokens < 1 || o.timed_tokens > 10000) {
    return Invalid(absl::StrCat("--timed-tokens ", o.timed_tokens,
                                " must lie in [1, 10000]"));
  }
  return absl::OkStatus();
}

// Every conversion the options ask for, in budget order, with duplicates
// removed.
absl::StatusOr<std::vector<Plan>> MakePlans(const CompareJobOptions& o,
                                            const ModelConfig& config,
                                            std::vector<std::string>* notes) {
  std::vector<double> budgets = o.budgets;
  std::sort(budgets.begin(), budgets.end());
  const std::set<std::string> variants(o.variants.begin(), o.variants.end());
  std::vector<Plan> plans;
  std::set<std::string> seen;
  auto add = [&](double budget, KvVariant v, const std::string& mode,
                 RopeMode rope, bool latent_norm = false) -> absl::Status {
    ConversionOptions c;
    c.variant = v;
    c.budget = budget;
    c.rope_mode = rope;
    c.latent_norm = latent_norm;
    auto target = ResolveTarget(config, c);
    if (!target.ok()) {
      notes->push_back(absl::StrCat(KvVariantName(v), " ", mode, " at budget ",
                                    budget, ": skipped (",
                                    target.status().message(), ")"));
      return absl::OkStatus();
    }
    // The model a plan builds: MQA is GQA pooled to one KV head.
    const int64_t pooled =
        KvVariantTypeOf(target->variant).PooledKvHeads(*target);
    const std::string model =
        pooled > 0 ? absl::StrCat("gqa n_kv=", pooled) : target->ToString();
    if (!seen.insert(absl::StrCat(model, "/", mode, latent_norm ? "+norm" : ""))
             .second) {
      notes->push_back(absl::StrCat(
          KvVariantName(v), " ", mode, " at budget ", budget, ": ", model,
          " is the largest that fits and is already measured (at a smaller "
          "budget, or as mqa); not repeated"));
      return absl::OkStatus();
    }
    plans.push_back({budget, v, mode, *target, latent_norm});
    return absl::OkStatus();
  };
  // Each compared variant in KvVariant order, those without a size (MQA)
  // first: measured once, at the first budget their cache fits.
  const AttentionShape shape = ShapeOf(config);
  std::vector<const KvVariantType*> once, sized;
  for (const KvVariantType* t : AllKvVariantTypes()) {
    if (!variants.count(t->name())) continue;
    (t->size_label() == nullptr ? once : sized).push_back(t);
  }
  std::set<const KvVariantType*> done;
  auto add_modes = [&](double b, const KvVariantType* t) -> absl::Status {
    for (const StudyMode& m : t->StudyModes(o.rope_modes)) {
      RETURN_IF_ERROR(add(b, t->id(), m.mode, m.rope_mode, m.latent_norm));
    }
    return absl::OkStatus();
  };
  auto ratio = [&](const KvVariantType* t) {
    return static_cast<double>(
               t->CacheElements(shape, t->DefaultBudgetBase())) /
           static_cast<double>(SourceCacheElements(shape));
  };
  for (double b : budgets) {
    for (const KvVariantType* t : once) {
      if (done.count(t) || ratio(t) > b + 1e-12) continue;
      RETURN_IF_ERROR(add_modes(b, t));
      done.insert(t);
    }
    for (const KvVariantType* t : sized) RETURN_IF_ERROR(add_modes(b, t));
  }
  for (const KvVariantType* t : once) {
    if (done.count(t)) continue;
    notes->push_back(absl::StrCat(t->name(), ": its cache ratio ", ratio(t),
                                  " exceeds every budget"));
  }
  return plans;
}

std::string RowDir(const CompareJobOptions& o, const Plan& p) {
  std::string name = absl::StrCat(p.target.ToString(), "-", p.rope_mode,
                                  p.latent_norm ? "-norm" : "");
  for (char& c : name) {
    if (c == ' ' || c == '=') c = '_';
  }
  return (fs::path(o.work_dir) / name).string();
}

absl::StatusOr<double> Perplexity(const std::string& checkpoint,
                                  const std::vector<std::string>& docs,
                                  int64_t* tokens) {
  ASSIGN_OR_RETURN(auto model, LanguageModel::Load(checkpoint));
  ASSIGN_OR_RETURN(auto r, model->Perplexity(docs));
  if (tokens != nullptr) *tokens = r.tokens;
  return r.perplexity;
}

// Whole-model decode steps: timed_tokens greedy steps after `context` cached,
// as the median, fastest and slowest step.
struct StepTimes {
  double median = 0, min = 0, max = 0;
};
absl::StatusOr<StepTimes> StepMs(const std::string& checkpoint,
                                 const std::string& mode, int64_t context,
                                 int64_t tokens) {
  GenerateBenchOptions g;
  g.checkpoint = checkpoint;
  g.mode = mode == "expanded" ? "reconstruct" : mode;
  g.context = context;
  g.tokens = tokens;
  ASSIGN_OR_RETURN(auto rows, RunGenerateBench(g));
  // Dense checkpoints have only the expanded row; factored ones time their mode
  // last.
  const GenerateBenchRow& r = rows.back();
  return StepTimes{r.step_ms_median, r.step_ms_min, r.step_ms_max};
}

}  // namespace

int64_t DecodeMacsPerStep(const AttentionShape& s, const KvConfig& c,
                          const std::string& mode, int64_t L) {
  return KvVariantTypeOf(c.variant).DecodeMacs(s, c, mode, L);
}

namespace {

// The study's parameters as its report records them.
nlohmann::json RunConfigJson(const CompareJobOptions& o) {
  auto range = [](const DocumentRange& r) {
    return absl::StrCat(r.begin, ":", r.end);
  };
  return {{"checkpoint", o.checkpoint},
          {"budgets", o.budgets},
          {"variants", o.variants},
          {"rope_modes", o.rope_modes},
          {"allocation", SizeAllocationName(o.allocation)},
          {"metric", o.calib.empty() ? "weight" : "activation"},
          {"calib", o.calib},
          {"calib_range", range(o.calib_range)},
          {"heal_steps", o.heal_steps},
          {"data", o.data},
          {"data_range", range(o.data_range)},
          {"heal_batch", o.heal_batch},
          {"heal_seq_len", o.heal_seq_len},
          {"heal_lr", o.heal_lr},
          {"heal_warmup", std::min(o.heal_warmup, o.heal_steps)},
          {"eval", o.eval},
          {"eval_range", range(o.eval_range)},
          {"kl_tokens", o.kl_tokens},
          {"contexts", o.contexts},
          {"timed_tokens", o.timed_tokens},
          {"cache_dtypes", kernels::NamesOf(o.cache_dtypes)}};
}

// What every row of one study shares.
struct Study {
  const CompareJobOptions& o;
  AttentionShape shape;
  std::vector<std::string> eval_docs;
  std::string kl_text;  // the held-out text as written for the verifier's KL
  std::map<int64_t, double> mha_ms;  // the source's step at each context
  double source_bf16_bytes = 0;      // per token, for the cache points
};

// `model` scored through its cache in every storage of the study.
absl::Status MeasureCachePoints(const Study& st, const std::string& model,
                                const std::string& label,
                                CompareReport* report) {
  for (kernels::CacheDType t : st.o.cache_dtypes) {
    ASSIGN_OR_RETURN(
        CachePoint p,
        MeasureCachePoint(model, label, t, st.eval_docs, st.source_bf16_bytes));
    report->cache_points.push_back(p);
  }
  return absl::OkStatus();
}

// Converts the row's plan; returns the converted checkpoint.
absl::StatusOr<std::string> ConvertRow(const Study& st, const Plan& p,
                                       const std::string& dir,
                                       CompareRow* row) {
  const CompareJobOptions& o = st.o;
  ConvertJobOptions co;
  co.checkpoint = o.checkpoint;
  co.out_dir = dir + "/converted";
  co.conversion.variant = p.variant;
  // Shared-plane LRKV has one rank for every layer.
  if (KvVariantTypeOf(p.variant).allocatable() &&
      !RopeModeTraitsOf(RopeModeOf(p.rope_mode)).shares_planes) {
    co.conversion.allocation = o.allocation;
  }
  co.conversion.budget = p.budget;
  co.rope_mode = RopeModeOf(p.rope_mode);
  co.latent_norm = p.latent_norm;
  if (!o.calib.empty()) {
    co.conversion.metric = SurgeryMetric::kActivation;
    co.calib_path = o.calib;
    co.calib_range = o.calib_range;
  }
  ASSIGN_OR_RETURN(ConversionReport cr, RunConvertJob(co));
  row->config = RowConfig(p, cr.target);  // per-layer sizes when allocated
  row->cache_ratio = cr.footprint.ratio_to_source;
  row->kv_params = cr.footprint.kv_params_per_layer;
  ASSIGN_OR_RETURN(row->ppl_before,
                   Perplexity(co.out_dir, st.eval_docs, nullptr));
  return co.out_dir;
}

// Heals the converted model; returns the healed checkpoint.
absl::StatusOr<std::string> HealRow(const Study& st,
                                    const std::string& converted,
                                    const std::string& dir, CompareRow* row) {
  const CompareJobOptions& o = st.o;
  HealJobOptions ho;
  ho.checkpoint = converted;
  ho.teacher = o.checkpoint;
  ho.data = o.data;
  ho.data_range = o.data_range;
  ho.seq_len = o.heal_seq_len;
  ho.heal.steps = o.heal_steps;
  ho.heal.batch = o.heal_batch;
  ho.heal.lr = o.heal_lr;
  ho.heal.warmup = std::min(o.heal_warmup, o.heal_steps);
  // Healing never hurts: the best of the unhealed model and ten evaluations
  // along the run is kept (judged on rows held out from --data, not on --eval).
  ho.heal.eval_every = std::max<int64_t>(1, o.heal_steps / 10);
  ho.heal.keep_best = true;
  ho.heal.trainable = TrainableSet::kKv;
  ho.heal.loss = HealLoss::kKd;
  ho.out_dir = dir + "/healed";
  ho.heal.should_stop = o.should_stop;
  ASSIGN_OR_RETURN(HealReport hr, RunHealJob(ho, nullptr));
  row->heal_kept_step = hr.kept_step;
  ASSIGN_OR_RETURN(double after, Perplexity(ho.out_dir, st.eval_docs, nullptr));
  row->ppl_after = after;
  return ho.out_dir;
}

// The row's verdict in its own decode mode (fp32) and its KL to the source.
absl::Status VerifyRow(const Study& st, const Plan& p, const std::string& model,
                       CompareRow* row) {
  VerifyJobOptions vo;
  vo.checkpoint = model;
  vo.source = st.o.checkpoint;
  vo.modes = {p.rope_mode == "expanded" ? "all" : p.rope_mode};
  vo.prompt_tokens = 16;
  vo.decode_tokens = 8;
  vo.text = st.kl_text;
  vo.fidelity_tokens = st.o.kl_tokens;
  ASSIGN_OR_RETURN(VerifyReport vr, RunVerifyJob(vo));
  row->verdict = "n/a (dense cache)";
  for (const auto& e : vr.equivalence) {
    if (e.mode == p.rope_mode && e.dtype == "fp32" && e.applicable) {
      row->verdict = e.equivalent ? "EQUIVALENT" : "NOT EQUIVALENT";
      row->verify_error = e.candidate_error;
      row->verify_bound = e.bound;
    }
  }
  if (vr.fidelity) row->kl_mean = vr.fidelity->kl_mean;
  return absl::OkStatus();
}

// The row's decode step at every context, beside the source's.
absl::Status BenchRow(const Study& st, const Plan& p, const std::string& model,
                      CompareRow* row, CompareReport* report) {
  for (int64_t L : st.o.contexts) {
    ASSIGN_OR_RETURN(StepTimes t,
                     StepMs(model, p.rope_mode, L, st.o.timed_tokens));
    const double ratio = t.median / st.mha_ms.at(L);
    report->latency.push_back({report->model, row->config, p.rope_mode, L,
                               t.median, ratio, t.min, t.max});
    row->step_ms = t.median;
    row->step_ratio_to_mha = ratio;
    row->step_context = L;
    row->madds_per_step = DecodeMacsPerStep(st.shape, p.target, p.rope_mode, L);
  }
  return absl::OkStatus();
}

// The source's perplexity and decode steps, and the held-out text for the KL.
absl::Status MeasureSource(Study& st, CompareReport* report) {
  const CompareJobOptions& o = st.o;
  ASSIGN_OR_RETURN(
      report->source_perplexity,
      Perplexity(o.checkpoint, st.eval_docs, &report->eval_tokens));
  for (int64_t L : o.contexts) {
    ASSIGN_OR_RETURN(StepTimes t,
                     StepMs(o.checkpoint, "expanded", L, o.timed_tokens));
    st.mha_ms[L] = t.median;
    report->latency.push_back({report->model, "mha (source)", "expanded", L,
                               t.median, 1.0, t.min, t.max});
  }
  // The verifier's KL reads the file's start.
  st.kl_text = (fs::path(o.work_dir) / "heldout.txt").string();
  std::string joined;
  for (const auto& d : st.eval_docs)
    absl::StrAppend(&joined, d, "\n<|endoftext|>\n");
  return WriteFileAtomically(st.kl_text, joined);
}

}  // namespace

absl::StatusOr<CompareReport> RunCompareJob(const CompareJobOptions& o,
                                            const CompareProgress& progress) {
  RETURN_IF_ERROR(Validate(o));
  // Progress is reported at every stage boundary, which is also where a stop
  // request is honoured.
  auto stage = [&](const std::string& name, int64_t i, int64_t n,
                   const std::string& m) -> absl::Status {
    if (progress) progress(name, i, n, m);
    if (o.should_stop && o.should_stop()) {
      return absl::CancelledError("the study was stopped on request");
    }
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(auto source, Checkpoint::Open(o.checkpoint));
  const ModelConfig config = source->config();
  if (config.kv.Factored()) {
    return Invalid(absl::StrCat(
        o.checkpoint, ": the study converts a dense (MHA/GQA) source"));
  }
  CompareReport report;
  report.model =
      o.label.empty() ? fs::path(o.checkpoint).filename().string() : o.label;
  report.run_config = RunConfigJson(o);
  Study st{o, ShapeOf(config)};
  ASSIGN_OR_RETURN(auto eval_docs_all, ReadDocuments(o.eval));
  st.eval_docs = o.eval_range.Slice(eval_docs_all);
  if (st.eval_docs.empty()) return Invalid("--eval-range selects no document");
  ASSIGN_OR_RETURN(std::vector<Plan> plans,
                   MakePlans(o, config, &report.notes));
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  if (ec)
    return absl::PermissionDeniedError(
        absl::StrCat(o.work_dir, ": ", ec.message()));

  const int64_t n = static_cast<int64_t>(plans.size());
  RETURN_IF_ERROR(stage("source", 0, n, "measuring the source"));
  RETURN_IF_ERROR(MeasureSource(st, &report));
  if (!o.cache_dtypes.empty()) {
    ASSIGN_OR_RETURN(st.source_bf16_bytes,
                     SourceBf16BytesPerToken(o.checkpoint));
    RETURN_IF_ERROR(stage("cache", 0, n, "the source through each cache"));
    RETURN_IF_ERROR(MeasureCachePoints(st, o.checkpoint, "source", &report));
  }
  for (int64_t i = 0; i < n; ++i) {
    const Plan& p = plans[i];
    const std::string name = absl::StrCat(p.target.ToString(), " ", p.rope_mode,
                                          p.latent_norm ? " +norm" : "");
    const std::string dir = RowDir(o, p);
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
    CompareRow row;
    row.model = report.model;
    row.budget = p.budget;
    row.variant = RowVariant(p);
    row.rope_mode = p.rope_mode;
    row.config = RowConfig(p, p.target);
    RETURN_IF_ERROR(stage("convert", i + 1, n, name));
    ASSIGN_OR_RETURN(std::string model, ConvertRow(st, p, dir, &row));
    if (o.heal_steps > 0) {
      RETURN_IF_ERROR(stage("heal", i + 1, n, name));
      ASSIGN_OR_RETURN(model, HealRow(st, model, dir, &row));
    }
    RETURN_IF_ERROR(stage("verify", i + 1, n, name));
    RETURN_IF_ERROR(VerifyRow(st, p, model, &row));
    RETURN_IF_ERROR(stage("bench", i + 1, n, name));
    RETURN_IF_ERROR(BenchRow(st, p, model, &row, &report));
    if (!o.cache_dtypes.empty()) {
      RETURN_IF_ERROR(stage("cache", i + 1, n, name));
      RETURN_IF_ERROR(MeasureCachePoints(
          st, model, absl::StrCat(row.config, " ", p.rope_mode), &report));
    }
    report.rows.push_back(row);
  }
  MarkParetoFront(&report.cache_points);
  report.cache_summary = SummarizeByteBudgets(report.cache_points);
  return report;
}

nlohmann::json CompareReport::ToJson() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j = {{"model", r.model},
                        {"budget", r.budget},
                        {"variant", r.variant},
                        {"rope_mode", r.rope_mode},
                        {"config", r.config},
                        {"cache_ratio", r.cache_ratio},
                        {"kv_params_per_layer", r.kv_params},
                        {"ppl_before_healing", r.ppl_before},
                        {"verdict", r.verdict},
                        {"verify_error", r.verify_error},
                        {"verify_bound", r.verify_bound},
                        {"step_ms", r.step_ms},
                        {"step_ratio_to_mha", r.step_ratio_to_mha},
                        {"step_context", r.step_context},
                        {"attention_madds_per_step_layer", r.madds_per_step}};
    if (r.ppl_after) j["ppl_after_healing"] = *r.ppl_after;
    if (r.heal_kept_step) j["heal_kept_step"] = *r.heal_kept_step;
    if (r.kl_mean) j["kl_mean"] = *r.kl_mean;
    rows_json.push_back(j);
  }
  nlohmann::json lat = nlohmann::json::array();
  for (const auto& l : latency) {
    lat.push_back({{"config", l.config},
                   {"rope_mode", l.rope_mode},
                   {"context", l.context},
                   {"step_ms", l.step_ms},
                   {"min_ms", l.min_ms},
                   {"max_ms", l.max_ms},
                   {"ratio_to_mha", l.ratio_to_mha}});
  }
  return {{"model", model},
          {"source_perplexity", source_perplexity},
          {"eval_tokens", eval_tokens},
          {"rows", rows_json},
          {"latency", lat},
          {"cache_points", CachePointsJson(cache_points)},
          {"cache_summary", cache_summary},
          {"notes", notes},
          {"run_config", run_config}};
}

std::string CompareReport::ToTable() const {
  std::string out = absl::StrFormat(
      "model %s: source perplexity %.4f on %d held-out tokens\n\n"
      "| budget | config | RoPE | cache | K/V params | ppl before | ppl after "
      "(kept step) "
      "| KL | verdict | "
      "step vs MHA (at L) | MACs/step/layer |\n"
      "|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|\n",
      model, source_perplexity, eval_tokens);
  for (const auto& r : rows) {
    absl::StrAppendFormat(
        &out,
        "| %.2f | %s | %s | %.1f%% | %d | %.3f | %s | %s | %s | %.2fx (%d) | "
        "%d |\n",
        r.budget, r.config, r.rope_mode, 100 * r.cache_ratio, r.kv_params,
        r.ppl_before,
        r.ppl_after
            ? absl::StrCat(absl::StrFormat("%.3f", *r.ppl_after),
                           r.heal_kept_step
                               ? absl::StrCat(" (step ", *r.heal_kept_step, ")")
                               : "")
            : "-",
        r.kl_mean ? absl::StrFormat("%.3f", *r.kl_mean) : "-", r.verdict,
        r.step_ratio_to_mha, r.step_context, r.madds_per_step);
  }
  if (!cache_points.empty()) {
    absl::StrAppend(&out,
                    "\nat equal bytes: held-out perplexity through each "
                    "cache (bytes per token, all layers, scales included)\n\n",
                    CachePointsTable(cache_points), "\n");
    for (const auto& line : cache_summary) absl::StrAppend(&out, line, "\n");
  }
  for (const auto& n : notes) absl::StrAppend(&out, "\nnote: ", n);
  if (!notes.empty()) out += "\n";
  return out;
}

}  // namespace lrkv
