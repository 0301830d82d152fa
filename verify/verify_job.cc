// `lrkv verify` as a job (see verify_job.h). LibTorch errors are caught here.
#include "verify/verify_job.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "formats/text_corpus.h"
#include "model/checkpoint.h"
#include "runtime/decode_engine.h"
#include "runtime/kv_layout.h"
#include "runtime/llama_weights.h"
#include "runtime/transformer.h"
#include "surgery/conversion_options.h"
#include "surgery/kv_variant.h"
#include "verify/equivalence.h"
#include "verify/fidelity.h"
#include "verify/head_diversity.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

constexpr char kBuiltinPrompt[] =
    "Once upon a time, there was a little girl named Lily. She loved to play "
    "outside in the park with her friends. One day, she saw a big red ball "
    "under a tree and ran to get it. Her mom smiled and said they could play "
    "together after lunch.";

std::vector<DecodeMode> ModesFor(const std::vector<std::string>& names,
                                 const ModelConfig& c, absl::Status* status) {
  std::vector<DecodeMode> modes;
  for (const auto& name : names) {
    if (name == "all") {
      for (DecodeMode m : KvLayoutTypeOf(c.kv.layout).FactoredModes(c))
        modes.push_back(m);
      continue;
    }
    auto m = ParseDecodeMode(name);
    if (!m.ok() || DecodeModeTraitsOf(*m).reference) {
      *status = Invalid(absl::StrCat(
          "--rope-mode '", name,
          "' must be reconstruct, plane, partial, naive, shared-plane or all"));
      return {};
    }
    modes.push_back(*m);
  }
  return modes;
}

// The prompt: the text's first tokens, else a built-in passage, else fixed ids.
std::vector<int32_t> BuildPrompt(const ModelConfig& config,
                                 const Tokenizer* tok,
                                 const std::vector<std::string>& docs,
                                 int64_t tokens) {
  std::vector<int32_t> prompt;
  if (tok != nullptr) {
    prompt.push_back(tok->document_start_id());
    for (const auto& d : docs) {
      if (static_cast<int64_t>(prompt.size()) >= tokens) break;
      for (int32_t id : tok->Encode(d)) prompt.push_back(id);
    }
    while (static_cast<int64_t>(prompt.size()) < tokens) {
      for (int32_t id : tok->Encode(kBuiltinPrompt)) prompt.push_back(id);
    }
  } else {
    for (int64_t i = 0; i < tokens; ++i) {
      prompt.push_back(
          static_cast<int32_t>(1 + (i * 7919) % (config.vocab_size - 1)));
    }
  }
  prompt.resize(tokens);
  return prompt;
}

// What the stages of one verification share.
struct VerifyRun {
  const VerifyJobOptions& o;
  const ModelConfig& config;
  const LlamaWeights& weights;
  std::vector<int32_t> prompt;
  VerifyReport report;
  int64_t stages = 0, stage = 0;

  void Progress(const std::string& what) {
    if (o.on_progress) o.on_progress(what, ++stage, stages);
  }
};

// Every mode x dtype decoded against the float64 reference.
absl::Status CheckEveryMode(VerifyRun& run,
                            const std::vector<at::ScalarType>& dtypes,
                            const std::vector<DecodeMode>& modes) {
  const VerifyJobOptions& o = run.o;
  const bool all =
      std::find(o.modes.begin(), o.modes.end(), "all") != o.modes.end();
  for (at::ScalarType dtype : dtypes) {
    EquivalenceOptions eo;
    eo.prompt = run.prompt;
    eo.decode_tokens = o.decode_tokens;
    eo.cache_dtype = dtype;
    eo.should_stop = o.should_stop;
    // One run of the reference engines serves every mode of this dtype.
    ASSIGN_OR_RETURN(auto references,
                     ReferenceEngines::Create(run.config, run.weights, dtype,
                                              o.prompt_tokens + o.decode_tokens,
                                              eo.factored_layout));
    eo.references = references.get();
    eo.on_step = o.on_step;
    std::string names;
    for (DecodeMode mode : modes)
      names += absl::StrCat(names.empty() ? "" : ", ", DecodeModeName(mode));
    run.Progress(absl::StrCat(names, " ",
                              dtype == at::kBFloat16 ? "bf16" : "fp32",
                              " decoding vs the f64 reference"));
    ASSIGN_OR_RETURN(auto results,
                     CheckEquivalences(run.config, run.weights, modes, eo));
    for (EquivalenceResult& r : results) {
      r.required = !all;
      // Under "all" naive is the negative control; asked for by name it is the
      // user's question (is naive decoding of this model exact?), answered with
      // a failure when it is not.
      r.expected_equivalent = r.expected_equivalent || !all;
      run.report.equivalence.push_back(std::move(r));
    }
  }
  return absl::OkStatus();
}

// Cache bytes (fp32 storage) of one engine after `tokens` prompt tokens.
absl::StatusOr<CacheBytes> RunFp32(const VerifyRun& run, DecodeMode mode,
                                   int64_t tokens) {
  at::NoGradGuard no_grad;
  EngineOptions eo;
  eo.capacity = tokens;
  ASSIGN_OR_RETURN(auto engine,
                   CreateDecodeEngine(run.config, run.weights, mode, eo));
  for (int64_t t = 0; t < tokens; ++t) {
    engine->Step(at::full({1}, run.prompt[t % run.prompt.size()], at::kLong));
  }
  const CacheMeasurement m = engine->MeasureCache();
  return CacheBytes{m.used_bytes, m.allocated_bytes};
}

// One engine's measured cache beside the accounting formula.
CacheCheck CacheCheckOf(const ModelConfig& config, DecodeMode mode,
                        const CacheBytes& bytes, int64_t tokens) {
  CacheCheck c;
  c.engine = DecodeModeName(mode);
  // The expanded engine of a factored model holds the materialised per-head
  // cache.
  const bool reference = DecodeModeTraitsOf(mode).reference;
  ModelConfig cached = config;
  if (reference) cached.kv = KvCompression();
  const KvConfig engine_kv = KvConfigOf(cached);
  c.variant = engine_kv.ToString();
  c.tokens = tokens;
  c.used_bytes = bytes.used;
  c.allocated_bytes = bytes.allocated;
  c.formula_bytes = static_cast<int64_t>(
      MeasureFootprint(ShapeOf(config), engine_kv, tokens, 1, 4).bytes);
  if (reference && config.kv.DecoupledRope()) {
    // Each KV head's key is [RoPE-free | the shared rotated key]: w more per
    // head.
    const int64_t w = config.kv.RopeWidth();
    c.variant = absl::StrCat(c.variant, ", keys +", w, " rotated dims each");
    c.formula_bytes += config.num_layers * tokens * config.num_kv_heads * w * 4;
  }
  return c;
}

// Cache bytes of every applicable engine after prompt + decode tokens, against
// the formula. The fp32 equivalence runs already decoded exactly that: their
// engines' bytes are used, and an engine is run here only when no fp32 check
// ran it.
absl::Status CheckCacheBytes(VerifyRun& run) {
  const int64_t tokens = run.o.prompt_tokens + run.o.decode_tokens;
  run.Progress("cache bytes against the formula");
  std::optional<CacheBytes> expanded_bytes;
  std::vector<std::pair<DecodeMode, CacheBytes>> factored;
  for (const auto& r : run.report.equivalence) {
    if (!r.applicable || r.dtype != "fp32") continue;
    ASSIGN_OR_RETURN(DecodeMode mode, ParseDecodeMode(r.mode));
    factored.emplace_back(mode, r.candidate_cache);
    expanded_bytes = r.reference_cache;  // fp32 checks run the expanded engine
  }
  if (factored.empty()) {  // bf16 only: no fp32 run to read
    for (const auto& r : run.report.equivalence) {
      if (!r.applicable) continue;
      ASSIGN_OR_RETURN(DecodeMode mode, ParseDecodeMode(r.mode));
      ASSIGN_OR_RETURN(CacheBytes bytes, RunFp32(run, mode, tokens));
      factored.emplace_back(mode, bytes);
    }
  }
  if (!expanded_bytes) {
    ASSIGN_OR_RETURN(expanded_bytes,
                     RunFp32(run, DecodeMode::kExpanded, tokens));
  }
  run.report.cache.push_back(
      CacheCheckOf(run.config, DecodeMode::kExpanded, *expanded_bytes, tokens));
  for (const auto& [mode, bytes] : factored) {
    run.report.cache.push_back(CacheCheckOf(run.config, mode, bytes, tokens));
  }
  return absl::OkStatus();
}

// The mean head diversity of a model's (materialised) heads: centred,
// uncentred.
std::pair<double, double> DiversityOf(const ModelConfig& c,
                                      const LlamaWeights& w) {
  double centred = 0, uncentred = 0;
  for (const auto& l : w.layers) {
    const DenseKv dense = ExpandKv(c, l);
    const HeadDiversity d = MeasureHeadDiversity(
        BilinearGram(l.wq, dense.wk, c.num_heads, c.num_kv_heads, c.head_dim));
    centred += d.centred;
    uncentred += d.uncentred;
  }
  const auto n = static_cast<double>(w.layers.size());
  return std::pair{centred / n, uncentred / n};
}

// Against the source (--source): its head diversity, and the converted model's
// fidelity to it on held-out text.
absl::Status CompareWithSource(VerifyRun& run, const Tokenizer* tok,
                               const std::vector<std::string>& docs,
                               DiversityResult* diversity) {
  const VerifyJobOptions& o = run.o;
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> src_ckpt,
                   Checkpoint::Open(o.source));
  ASSIGN_OR_RETURN(LlamaWeights src_weights,
                   LoadLlamaWeights(src_ckpt, StoredDtype()));
  const ModelConfig& sc = src_ckpt->config();
  if (sc.num_layers != run.config.num_layers ||
      sc.hidden_size != run.config.hidden_size ||
      sc.vocab_size != run.config.vocab_size ||
      sc.num_heads != run.config.num_heads) {
    return Invalid(
        absl::StrCat(o.source,
                     ": the source's shape (layers, width, heads, vocabulary) "
                     "differs from ",
                     o.checkpoint));
  }
  diversity->has_source = true;
  std::tie(diversity->source_centred, diversity->source_uncentred) =
      DiversityOf(sc, src_weights);
  if (o.text.empty()) {
    run.report.fidelity_skipped =
        "no --text given (fidelity is measured on held-out text)";
  } else if (docs.empty()) {
    run.report.fidelity_skipped = absl::StrCat(o.text, " holds no document");
  } else if (tok == nullptr) {
    run.report.fidelity_skipped = absl::StrCat(
        o.checkpoint, " has no tokenizer to encode ", o.text, " with");
  }
  if (docs.empty() || tok == nullptr) return absl::OkStatus();
  run.Progress(absl::StrCat("fidelity to the source on ", o.fidelity_tokens,
                            " positions at most"));
  ASSIGN_OR_RETURN(auto source_model,
                   Transformer::Create(sc, std::move(src_weights)));
  ASSIGN_OR_RETURN(auto converted_model,
                   Transformer::Create(run.config, run.weights));
  RETURN_IF_ERROR(CheckStop(o.should_stop, "verification (fidelity)"));
  ASSIGN_OR_RETURN(run.report.fidelity,
                   MeasureFidelity(*source_model, *converted_model, *tok, docs,
                                   o.fidelity_tokens));
  return absl::OkStatus();
}

// The gates the options set, judged on `fidelity` (a gate without it fails:
// NaN).
std::vector<QualityGate> QualityGates(
    const VerifyJobOptions& o, const std::optional<FidelityResult>& fidelity) {
  const double nan = std::nan("");
  std::vector<QualityGate> gates;
  if (o.max_ppl_increase) {
    gates.push_back(
        {"max_ppl_increase", "relative perplexity increase",
         fidelity
             ? fidelity->converted_perplexity / fidelity->source_perplexity - 1
             : nan,
         *o.max_ppl_increase, true});
  }
  if (o.min_top1) {
    gates.push_back({"min_top1", "top-1 agreement",
                     fidelity ? fidelity->top1_agreement : nan, *o.min_top1,
                     false});
  }
  if (o.max_kl) {
    gates.push_back({"max_kl", "mean KL(source||converted) nats",
                     fidelity ? fidelity->kl_mean : nan, *o.max_kl, true});
  }
  return gates;
}

absl::StatusOr<VerifyReport> Run(const VerifyJobOptions& o) {
  RETURN_IF_ERROR(ValidateVerifyJobOptions(o));
  std::vector<at::ScalarType> dtypes;
  if (o.dtype == "fp32" || o.dtype == "both") dtypes.push_back(at::kFloat);
  if (o.dtype == "bf16" || o.dtype == "both") dtypes.push_back(at::kBFloat16);

  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt,
                   Checkpoint::Open(o.checkpoint));
  const ModelConfig& config = ckpt->config();
  // The decode engines attend to their whole cache: exact for a sliding-window
  // model only while every position fits in the window.
  if (config.sliding_window > 0 &&
      o.prompt_tokens + o.decode_tokens > config.sliding_window) {
    return Invalid(absl::StrCat(
        "--prompt-tokens + --decode-tokens = ",
        o.prompt_tokens + o.decode_tokens,
        " exceeds the model's sliding_window of ", config.sliding_window,
        "; the decode engines attend to the whole cache, so keep the "
        "verified sequence within the window"));
  }
  RETURN_IF_ERROR(CheckSomethingToVerify(o, config));
  absl::Status mode_status;
  const auto modes = ModesFor(o.modes, config, &mode_status);
  RETURN_IF_ERROR(mode_status);
  std::vector<std::string> docs;
  if (!o.text.empty()) {
    ASSIGN_OR_RETURN(docs, ReadDocuments(o.text));
  }
  ASSIGN_OR_RETURN(LlamaWeights weights, LoadLlamaWeights(ckpt, StoredDtype()));
  const Tokenizer* tok = ckpt->tokenizer();

  VerifyRun run{o, config, weights,
                BuildPrompt(config, tok, docs, o.prompt_tokens)};
  run.report.checkpoint = o.checkpoint;
  run.report.source = o.source;
  run.report.variant = KvConfigOf(config).ToString();
  // Stages: every mode of each dtype, the cache check, fidelity, head
  // diversity.
  run.stages =
      static_cast<int64_t>(dtypes.size()) + 2 + (o.source.empty() ? 0 : 1);
  RETURN_IF_ERROR(CheckEveryMode(run, dtypes, modes));
  RETURN_IF_ERROR(CheckCacheBytes(run));
  run.Progress("head diversity");
  DiversityResult diversity;
  diversity.heads = config.num_heads;
  std::tie(diversity.converted_centred, diversity.converted_uncentred) =
      DiversityOf(config, weights);
  if (!o.source.empty())
    RETURN_IF_ERROR(CompareWithSource(run, tok, docs, &diversity));
  run.report.diversity = diversity;
  run.report.gates = QualityGates(o, run.report.fidelity);
  return std::move(run.report);
}

}  // namespace

absl::Status ValidateVerifyJobOptions(const VerifyJobOptions& o) {
  if (o.prompt_tokens < 1 || o.prompt_tokens > 4096) {
    return Invalid(absl::StrCat("--prompt-tokens ", o.prompt_tokens,
                                " must lie in [1, 4096]"));
  }
  if (o.decode_tokens < 0 || o.decode_tokens > 4096) {
    return Invalid(absl::StrCat("--decode-tokens ", o.decode_tokens,
                                " must lie in [0, 4096]"));
  }
  if (o.dtype != "fp32" && o.dtype != "bf16" && o.dtype != "both") {
    return Invalid(
        absl::StrCat("--dtype '", o.dtype, "' must be fp32, bf16 or both"));
  }
  if (o.modes.empty()) return Invalid("--rope-mode lists no mode");
  for (const auto& name : o.modes) {
    auto m = ParseDecodeMode(name);
    if (name != "all" && (!m.ok() || DecodeModeTraitsOf(*m).reference)) {
      return Invalid(
          absl::StrCat("--rope-mode '", name,
                       "' must be reconstruct, plane, partial, naive or all"));
    }
  }
  if (o.fidelity_tokens < 1 || o.fidelity_tokens > (int64_t{1} << 20)) {
    return Invalid(absl::StrCat("--fidelity-tokens ", o.fidelity_tokens,
                                " must lie in [1, 1048576]"));
  }
  const bool gated = o.max_ppl_increase || o.min_top1 || o.max_kl;
  if (gated && (o.source.empty() || o.text.empty())) {
    return Invalid(
        "--max-ppl-increase, --min-top1 and --max-kl gate the fidelity to the "
        "source on "
        "held-out text: give --source and --text");
  }
  if (!o.text.empty()) return CheckTextFile(o.text, "--text");
  return absl::OkStatus();
}

absl::Status CheckSomethingToVerify(const VerifyJobOptions& o,
                                    const ModelConfig& config) {
  if (config.kv.Factored() || !o.source.empty()) {
    return absl::OkStatus();
  }
  return Invalid(absl::StrCat(
      "nothing to verify: the checkpoint's K/V cache is dense (",
      KvConfigOf(config).ToString(),
      "), so there is no factored decoding to check against its expansion; "
      "verify a converted model, or give --source to measure this one's "
      "fidelity to the model it came from"));
}

absl::StatusOr<VerifyReport> RunVerifyJob(const VerifyJobOptions& options) {
  try {
    return Run(options);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("verification failed in LibTorch: ",
                                            e.what_without_backtrace()));
  }
}

}  // namespace lrkv
