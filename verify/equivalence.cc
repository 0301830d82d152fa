// The equivalence check (see equivalence.h).
#include "verify/equivalence.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace lrkv {
namespace {

void Worst(ErrorStats* acc, const ErrorStats& e) {
  acc->max_abs = std::max(acc->max_abs, e.max_abs);
  acc->max_rel = std::max(acc->max_rel, e.max_rel);
  acc->cos_dist = std::max(acc->cos_dist, e.cos_dist);
}

bool AllFinite(const at::Tensor& t) { return t.isfinite().all().item<bool>(); }

// Root-mean-square of differences accumulated over a run (and their max).
struct Errors {
  double sum_sq = 0;
  int64_t count = 0;
  double max = 0;
  void Add(const at::Tensor& diff) {
    sum_sq += diff.pow(2).sum().item<double>();
    count += diff.numel();
    max = std::max(max, diff.abs().max().item<double>());
  }
  double rms() const { return count > 0 ? std::sqrt(sum_sq / count) : 0.0; }
};

// One comparison site (a layer's attention output, or the logits) over the run.
struct Site {
  Errors candidate;  // candidate − f64
  Errors plain;      // plain expanded engine (kernel) − f64
  Errors reordered;  // plain expanded engine through ATen − f64
  Errors own;        // candidate's algorithm in fp32 − the same in float64
  Errors rounding;  // FlashAttention's atol term: fl32(f64 + 0.3) − 0.3 − f64
  Errors values;    // the f64 values themselves (the scale of the site)
  std::vector<double>
      candidate_rms;  // the candidate's RMS error up to each step
  double reference() const {
    return std::max({plain.rms(), reordered.rms(), own.rms()});
  }
  double bound() const { return 2 * reference() + 2 * rounding.rms(); }
  // The same rule on max errors: greedy ties are judged by it.
  double max_bound() const {
    return 2 * std::max({plain.max, reordered.max, own.max}) + 2 * rounding.max;
  }
  double Relative(double x) const {
    return values.rms() > 0 ? x / values.rms() : x;
  }
};

// `candidate64` is the candidate's output already in float64.
void Accumulate(Site* s, const at::Tensor& candidate64, const at::Tensor& plain,
                const at::Tensor& reordered, const at::Tensor& f64,
                const at::Tensor& rounded, const at::Tensor& exact64) {
  auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  s->candidate.Add(candidate64 - f64);
  s->plain.Add(d(plain) - f64);
  s->reordered.Add(d(reordered) - f64);
  s->own.Add(d(rounded) - exact64);
  const auto f32 = f64.to(at::kFloat);
  s->rounding.Add(d((f32 + 0.3f) - 0.3f) - f64);
  s->values.Add(f64);
  s->candidate_rms.push_back(s->candidate.rms());
}

}  // namespace

ErrorStats Compare(const at::Tensor& candidate, const at::Tensor& reference) {
  const auto c = candidate.to(at::kDouble).reshape({-1});
  const auto r = reference.to(at::kDouble).reshape({-1});
  ErrorStats e;
  e.max_abs = (c - r).abs().max().item<double>();
  const double ref_max = r.abs().max().item<double>();
  e.max_rel = ref_max > 0 ? e.max_abs / ref_max : e.max_abs;
  const double denom = c.norm().item<double>() * r.norm().item<double>();
  e.cos_dist =
      denom > 0 ? std::max(0.0, 1.0 - c.dot(r).item<double>() / denom) : 0.0;
  return e;
}

absl::StatusOr<std::unique_ptr<ReferenceEngines>> ReferenceEngines::Create(
    const ModelConfig& config, const LlamaWeights& weights,
    at::ScalarType cache_dtype, int64_t capacity,
    FactoredCacheLayout factored_layout) {
  std::unique_ptr<ReferenceEngines> r(new ReferenceEngines());
  r->cache_dtype_ = cache_dtype;
  EngineOptions eo;
  eo.cache_dtype = cache_dtype;
  eo.capacity = capacity;
  eo.factored_layout = factored_layout;
  // The plain engine shows what the candidate's storage dtype and fp32
  // arithmetic cost a standard cache (through the kernel, and reordered through
  // ATen); the float64 engine is the truth all are measured against.
  r->weights32_ = ForCompute(weights, at::kFloat);
  r->weights64_ = ForCompute(weights, at::kDouble);
  const LlamaWeights& weights32 = r->weights32_;
  ASSIGN_OR_RETURN(r->plain_, CreateDecodeEngine(config, weights32,
                                                 DecodeMode::kExpanded, eo));
  EngineOptions reordered_options = eo;
  reordered_options.kernels = false;
  ASSIGN_OR_RETURN(r->reordered_,
                   CreateDecodeEngine(config, weights32, DecodeMode::kExpanded,
                                      reordered_options));
  EngineOptions f64_options = eo;
  f64_options.cache_dtype = at::kDouble;
  f64_options.materialize = true;
  ASSIGN_OR_RETURN(r->truth_,
                   CreateDecodeEngine(config, r->weights64_,
                                      DecodeMode::kExpanded, f64_options));
  return r;
}

absl::StatusOr<const ReferenceEngines::StepOutputs*> ReferenceEngines::At(
    int64_t step, int32_t token, Companions* with) {
  Companions none;
  if (with == nullptr) with = &none;
  if (step < static_cast<int64_t>(steps_.size())) {
    if (steps_[step].token != token) {
      return absl::FailedPreconditionError(
          absl::StrCat("reference step ", step, " ran token ",
                       steps_[step].token, ", asked for ", token));
    }
    with->fp32_logits = DecodeEngine::StepTogether(with->fp32, token);
    with->f64_logits = DecodeEngine::StepTogether(with->f64, token);
    return &steps_[step];
  }
  if (step != static_cast<int64_t>(steps_.size())) {
    return absl::FailedPreconditionError("reference steps are run in order");
  }
  // One pass over the weights per compute dtype: the truth with the float64
  // companions, the plain engines with the fp32 ones.
  std::vector<DecodeEngine*> f64 = {truth_.get()};
  f64.insert(f64.end(), with->f64.begin(), with->f64.end());
  std::vector<DecodeEngine*> fp32 = {plain_.get(), reordered_.get()};
  fp32.insert(fp32.end(), with->fp32.begin(), with->fp32.end());
  const auto f64_logits = DecodeEngine::StepTogether(f64, token);
  const auto fp32_logits = DecodeEngine::StepTogether(fp32, token);
  StepOutputs s;
  s.token = token;
  s.truth_logits = f64_logits[0];
  s.truth = truth_->attention_outputs();
  s.plain_logits = fp32_logits[0];
  s.plain = plain_->attention_outputs();
  s.reordered_logits = fp32_logits[1];
  s.reordered = reordered_->attention_outputs();
  with->f64_logits.assign(f64_logits.begin() + 1, f64_logits.end());
  with->fp32_logits.assign(fp32_logits.begin() + 2, fp32_logits.end());
  steps_.push_back(std::move(s));
  return &steps_.back();
}

namespace {

// A greedy step: whether the candidate chose f64's token, and f64's top-1 minus
// top-2 logit.
struct Greedy {
  bool agreed;
  double margin;
};

// One mode's check: its engines, run beside the shared references, and what
// it has measured so far.
struct ModeCheck {
  EquivalenceResult r;
  // The candidate; its algorithm in fp32 ATen arithmetic, and in float64.
  // Unset where the mode does not apply.
  std::unique_ptr<DecodeEngine> candidate, rounded, exact64;
  std::vector<Site> sites;  // layers, then the logits
  std::vector<Greedy> greedy;
  bool running() const { return candidate != nullptr && !r.non_finite; }
};

void NoteNonFinite(int64_t step, int64_t layer, EquivalenceResult* r) {
  if (r->non_finite) return;
  r->non_finite = true;
  r->first_bad_step = step;
  r->first_bad_layer = layer;
  r->first_bad_error = std::numeric_limits<double>::quiet_NaN();
}

// The f64 engine's greedy token at a step.
int32_t TruthNext(const ReferenceEngines::StepOutputs& ref) {
  return static_cast<int32_t>(
      std::get<1>(ref.truth_logits.topk(2, -1))[0][0].item<int64_t>());
}

// The logits one step gave a check's three engines.
struct StepLogits {
  at::Tensor candidate, rounded, exact64;
};

// Accumulates one step of a check against the references' step: each site's
// errors, and (past the prompt) whether its greedy token agreed with f64's.
void CompareStep(const ReferenceEngines::StepOutputs& ref,
                 const StepLogits& logits, int64_t step,
                 const EquivalenceOptions& o, ModeCheck* m) {
  EquivalenceResult* r = &m->r;
  const size_t layers = m->sites.size() - 1;
  for (size_t layer = 0; layer <= layers; ++layer) {
    const bool at_logits = layer == layers;
    auto pick = [&](const at::Tensor& l,
                    const std::vector<at::Tensor>& outs) -> const at::Tensor& {
      return at_logits ? l : outs[layer];
    };
    const at::Tensor& c =
        pick(logits.candidate, m->candidate->attention_outputs());
    const at::Tensor& p = pick(ref.plain_logits, ref.plain);
    const at::Tensor& t = pick(ref.truth_logits, ref.truth);
    const int64_t site = at_logits ? -1 : static_cast<int64_t>(layer);
    if (!AllFinite(c) || !AllFinite(p) || !AllFinite(t)) {
      NoteNonFinite(step, site, r);
      return;
    }
    const at::Tensor c64 = c.to(at::kDouble);  // converted once for both
    Accumulate(&m->sites[layer], c64, p,
               pick(ref.reordered_logits, ref.reordered), t,
               pick(logits.rounded, m->rounded->attention_outputs()),
               pick(logits.exact64, m->exact64->attention_outputs()));
    Worst(at_logits ? &r->worst_logits : &r->worst_layer, Compare(c64, t));
  }
  const auto top = ref.truth_logits.topk(2, -1);
  const int32_t truth_next = TruthNext(ref);
  const auto cand_next =
      static_cast<int32_t>(logits.candidate.argmax(-1).item<int64_t>());
  // Steps P-1 .. P+N-2 produce the N greedy tokens.
  const int64_t generated = step + 1 - static_cast<int64_t>(o.prompt.size());
  if (generated >= 0 && generated < o.decode_tokens) {
    const auto values = std::get<0>(top);
    m->greedy.push_back({cand_next == truth_next,
                         values.size(1) > 1
                             ? (values[0][0] - values[0][1]).item<double>()
                             : std::numeric_limits<double>::infinity()});
  }
  ++r->steps;
}

// Decodes the prompt and then f64's greedy tokens (teacher-forced) on every
// check's engines in lockstep with the references: each step is one pass over
// the weights per compute dtype for all of them (a step streams the weights;
// checking four modes one after another streamed them ten times a token).
absl::Status DecodeAndCompare(ReferenceEngines* refs,
                              const EquivalenceOptions& o,
                              std::vector<ModeCheck>* checks) {
  const int64_t total = static_cast<int64_t>(o.prompt.size()) + o.decode_tokens;
  int32_t next = o.prompt[0];
  for (int64_t step = 0; step < total; ++step) {
    RETURN_IF_ERROR(CheckStop(o.should_stop, "verification"));
    if (step < static_cast<int64_t>(o.prompt.size())) next = o.prompt[step];
    ReferenceEngines::Companions with;
    std::vector<ModeCheck*> running;
    for (ModeCheck& m : *checks) {
      if (!m.running()) continue;
      running.push_back(&m);
      with.fp32.insert(with.fp32.end(), {m.candidate.get(), m.rounded.get()});
      with.f64.push_back(m.exact64.get());
    }
    if (running.empty()) break;
    ASSIGN_OR_RETURN(const ReferenceEngines::StepOutputs* ref,
                     refs->At(step, next, &with));
    for (size_t i = 0; i < running.size(); ++i) {
      CompareStep(*ref,
                  {with.fp32_logits[2 * i], with.fp32_logits[2 * i + 1],
                   with.f64_logits[i]},
                  step, o, running[i]);
    }
    next = TruthNext(*ref);  // teacher-forced on the f64 engine's greedy choice
    if (o.on_step) o.on_step(step + 1, total);
  }
  return absl::OkStatus();
}

// Whether every site stayed within its bound: the worst site by ratio, and the
// first step at which a site that fails had left its bound (its RMS error up to
// that step above the bound).
bool SitesWithinBounds(const std::vector<Site>& sites, EquivalenceResult* r) {
  const size_t layers = sites.size() - 1;
  bool within = true;
  for (size_t i = 0; i <= layers; ++i) {
    const Site& s = sites[i];
    const int64_t site = i == layers ? -1 : static_cast<int64_t>(i);
    const double e = s.candidate.rms(), bound = s.bound();
    const double ratio = bound > 0 ? e / bound
                         : e > 0   ? std::numeric_limits<double>::infinity()
                                   : 0.0;
    if (i == 0 || ratio > r->ratio) {
      r->ratio = ratio;
      r->worst_site = site;
      r->candidate_error = s.Relative(e);
      r->reference_error = s.Relative(s.reference());
      r->bound = s.Relative(bound);
    }
    if (e <= bound) continue;
    within = false;
    for (size_t step = 0; step < s.candidate_rms.size(); ++step) {
      if (s.candidate_rms[step] <= bound) continue;
      if (r->first_bad_step < 0 ||
          static_cast<int64_t>(step) < r->first_bad_step) {
        r->first_bad_step = static_cast<int64_t>(step);
        r->first_bad_layer = site;
        r->first_bad_error = s.Relative(s.candidate_rms[step]);
      }
      break;
    }
  }
  return within;
}

// Whether every greedy token agreed with f64's, or differed on a tie within the
// logits' max-error bound.
bool TokensAgree(const std::vector<Greedy>& greedy, double logits_bound,
                 EquivalenceResult* r) {
  bool ok = true;
  for (const Greedy& g : greedy) {
    if (g.agreed) {
      ++r->tokens_agreed;
    } else if (g.margin <= logits_bound) {
      ++r->tokens_tied;
    } else {
      ok = false;
    }
  }
  return ok;
}

// A check of `mode` ready to run beside `refs`: its result's description, and
// its engines (none, with the reason, where the mode does not apply).
absl::StatusOr<ModeCheck> StartCheck(const ModelConfig& config,
                                     ReferenceEngines* refs, DecodeMode mode,
                                     const EquivalenceOptions& o,
                                     const EngineOptions& eo) {
  ModeCheck m;
  EquivalenceResult& r = m.r;
  r.mode = DecodeModeName(mode);
  r.dtype = o.cache_dtype == at::kBFloat16 ? "bf16" : "fp32";
  r.expected_equivalent = !DecodeModeTraitsOf(mode).negative_control;
  const LlamaWeights& weights = refs->weights32();
  EngineOptions candidate_options = eo;
  candidate_options.fault = o.fault;
  auto candidate = CreateDecodeEngine(config, weights, mode, candidate_options);
  if (!candidate.ok()) {
    r.applicable = false;
    r.reason = std::string(candidate.status().message());
    return m;
  }
  m.candidate = std::move(*candidate);
  r.cache_layout = m.candidate->cache_layout();
  // The candidate's own algorithm twice, both through ATen on rows: in fp32
  // arithmetic with its cache in the candidate's dtype, and in float64 with a
  // float64 cache. Their distance is what rounding costs that algorithm (a
  // factored cache stores other values than a standard one, and sums more
  // terms); no algorithmic difference enters it, since both sides decode the
  // same way, and no kernel does.
  EngineOptions twin = eo;
  twin.factored_layout = FactoredCacheLayout::kRows;
  twin.kernels = false;
  twin.float64_sums = false;
  ASSIGN_OR_RETURN(m.rounded, CreateDecodeEngine(config, weights, mode, twin));
  twin.cache_dtype = at::kDouble;
  ASSIGN_OR_RETURN(m.exact64,
                   CreateDecodeEngine(config, refs->weights64(), mode, twin));
  r.reference = "expanded engine in float64 (weights, cache and arithmetic)";
  r.plain =
      absl::StrCat("expanded engine, ", r.dtype, " cache, fp32 arithmetic");
  r.rule = absl::StrCat(
      "per layer output and logits, RMS over the run: |candidate - f64| <= 2 "
      "max(|expanded ",
      r.dtype,
      " - f64| (kernel and ATen), |candidate's algorithm in fp32 ATen, ",
      r.dtype,
      " cache - the same in f64|) + atol (twice fp32 rounding of the f64 "
      "values); greedy "
      "tokens equal to f64's except ties within the max-error bound");
  m.sites.resize(weights.layers.size() + 1);
  return m;
}

// The verdict of a check that has run: sites within their bounds, greedy
// tokens agreeing, every value finite; and the cache bytes at the end.
void FinishCheck(const ReferenceEngines& refs, ModeCheck* m) {
  EquivalenceResult& r = m->r;
  r.decode_tokens = static_cast<int64_t>(m->greedy.size());
  const bool within = !r.non_finite && SitesWithinBounds(m->sites, &r);
  const bool tokens_agree =
      TokensAgree(m->greedy, m->sites.back().max_bound(), &r);
  const bool tokens_ok = !r.non_finite && tokens_agree;
  for (auto [meas, bytes] :
       {std::pair{m->candidate->MeasureCache(), &r.candidate_cache},
        {refs.PlainCache(), &r.reference_cache}}) {
    *bytes = {meas.used_bytes, meas.allocated_bytes};
  }
  r.equivalent = within && tokens_ok;
}

}  // namespace

absl::StatusOr<std::vector<EquivalenceResult>> CheckEquivalences(
    const ModelConfig& config, const LlamaWeights& stored,
    const std::vector<DecodeMode>& modes, const EquivalenceOptions& o) {
  if (o.prompt.empty())
    return absl::InvalidArgumentError("the prompt is empty");
  if (o.decode_tokens < 0)
    return absl::InvalidArgumentError("decode tokens must be >= 0");
  EngineOptions eo;
  eo.cache_dtype = o.cache_dtype;
  eo.capacity = static_cast<int64_t>(o.prompt.size()) + o.decode_tokens;
  eo.factored_layout = o.factored_layout;
  at::NoGradGuard no_grad;
  // The references convert the weights once per dtype (ForCompute: the K/V
  // factors and norms, not the big matrices every engine streams as stored);
  // the checks' engines use those conversions.
  std::unique_ptr<ReferenceEngines> own_references;
  ReferenceEngines* refs = o.references;
  if (refs == nullptr) {
    ASSIGN_OR_RETURN(own_references,
                     ReferenceEngines::Create(config, stored, o.cache_dtype,
                                              eo.capacity, o.factored_layout));
    refs = own_references.get();
  } else if (refs->cache_dtype() != o.cache_dtype) {
    return absl::InvalidArgumentError(
        "the shared reference engines run another cache dtype");
  }
  std::vector<ModeCheck> checks;
  for (DecodeMode mode : modes) {
    ASSIGN_OR_RETURN(ModeCheck m, StartCheck(config, refs, mode, o, eo));
    checks.push_back(std::move(m));
  }
  RETURN_IF_ERROR(DecodeAndCompare(refs, o, &checks));
  std::vector<EquivalenceResult> results;
  for (ModeCheck& m : checks) {
    if (m.candidate != nullptr) FinishCheck(*refs, &m);
    results.push_back(std::move(m.r));
  }
  return results;
}

absl::StatusOr<EquivalenceResult> CheckEquivalence(
    const ModelConfig& config, const LlamaWeights& stored, DecodeMode mode,
    const EquivalenceOptions& o) {
  ASSIGN_OR_RETURN(auto results, CheckEquivalences(config, stored, {mode}, o));
  return std::move(results[0]);
}

}  // namespace lrkv
