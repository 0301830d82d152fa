// `lrkv verify` as a job (see verify_job.h). LibTorch errors are caught here.
#include "verify/verify_job.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "runtime/llama_weights.h"
#include "base/status_macros.h"
#include "model/text_corpus.h"
#include "runtime/transformer.h"
#include "surgery/conversion_options.h"
#include "runtime/decode_engine.h"
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

// The accounting configuration of a (converted) model.
KvConfig KvConfigOf(const ModelConfig& c) {
  KvConfig kv;
  switch (c.kv.layout) {
    case KvLayout::kLrkv:
      kv.variant = KvVariant::kLrkv;
      kv.rank = c.kv.rank;
      kv.layer_sizes = c.kv.layer_sizes;
      break;
    case KvLayout::kMla:
      kv.variant = KvVariant::kMla;
      kv.latent = c.kv.latent;
      kv.rope_dim = c.kv.RopeWidth();
      kv.layer_sizes = c.kv.layer_sizes;
      break;
    case KvLayout::kDense:
      kv.variant = c.num_kv_heads == c.num_heads ? KvVariant::kMha
                   : c.num_kv_heads == 1         ? KvVariant::kMqa
                                                 : KvVariant::kGqa;
      kv.kv_heads = c.num_kv_heads;
      break;
  }
  return kv;
}

std::vector<DecodeMode> ModesFor(const std::vector<std::string>& names,
                                 const ModelConfig& c, absl::Status* status) {
  std::vector<DecodeMode> modes;
  for (const auto& name : names) {
    if (name == "all") {
      if (c.kv.layout == KvLayout::kLrkv && c.kv.rope_mode == RopeMode::kSharedPlane) {
        modes.push_back(DecodeMode::kSharedPlane);
      } else if (c.kv.layout == KvLayout::kLrkv) {
        for (DecodeMode m : {DecodeMode::kReconstruct, DecodeMode::kPlane,
                             DecodeMode::kPartial, DecodeMode::kNaive}) {
          modes.push_back(m);
        }
      } else if (c.kv.layout == KvLayout::kMla) {
        modes.push_back(c.kv.DecoupledRope() ? DecodeMode::kPartial : DecodeMode::kReconstruct);
      }
      continue;
    }
    auto m = ParseDecodeMode(name);
    if (!m.ok() || *m == DecodeMode::kExpanded) {
      *status = Invalid(
          absl::StrCat("--rope-mode '", name,
                       "' must be reconstruct, plane, partial, naive, shared-plane or all"));
      return {};
    }
    modes.push_back(*m);
  }
  return modes;
}

absl::StatusOr<VerifyReport> Run(const VerifyJobOptions& o) {
  RETURN_IF_ERROR(ValidateVerifyJobOptions(o));
  std::vector<at::ScalarType> dtypes;
  if (o.dtype == "fp32" || o.dtype == "both") dtypes.push_back(at::kFloat);
  if (o.dtype == "bf16" || o.dtype == "both") dtypes.push_back(at::kBFloat16);

  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt, Checkpoint::Open(o.checkpoint));
  const ModelConfig& config = ckpt->config();
  // The decode engines attend to their whole cache: exact for a sliding-window model
  // only while every position fits in the window.
  if (config.sliding_window > 0 && o.prompt_tokens + o.decode_tokens > config.sliding_window) {
    return Invalid(absl::StrCat("--prompt-tokens + --decode-tokens = ",
                                o.prompt_tokens + o.decode_tokens,
                                " exceeds the model's sliding_window of ", config.sliding_window,
                                "; the decode engines attend to the whole cache, so keep the "
                                "verified sequence within the window"));
  }
  absl::Status mode_status;
  const auto modes = ModesFor(o.modes, config, &mode_status);
  RETURN_IF_ERROR(mode_status);
  std::vector<std::string> docs;
  if (!o.text.empty()) {
    ASSIGN_OR_RETURN(docs, ReadDocuments(o.text));
  }
  ASSIGN_OR_RETURN(LlamaWeights weights, LoadLlamaWeights(ckpt, StoredDtype()));

  // The prompt: the text's first tokens, else a built-in passage, else fixed
  // ids.
  std::vector<int32_t> prompt;
  const Tokenizer* tok = ckpt->tokenizer();
  if (tok != nullptr) {
    prompt.push_back(tok->document_start_id());
    std::string text;
    for (const auto& d : docs) {
      if (static_cast<int64_t>(prompt.size()) >= o.prompt_tokens) break;
      for (int32_t id : tok->Encode(d)) prompt.push_back(id);
    }
    while (static_cast<int64_t>(prompt.size()) < o.prompt_tokens) {
      for (int32_t id : tok->Encode(kBuiltinPrompt)) prompt.push_back(id);
    }
  } else {
    for (int64_t i = 0; i < o.prompt_tokens; ++i) {
      prompt.push_back(
          static_cast<int32_t>(1 + (i * 7919) % (config.vocab_size - 1)));
    }
  }
  prompt.resize(o.prompt_tokens);

  VerifyReport report;
  report.checkpoint = o.checkpoint;
  report.source = o.source;
  const KvConfig kv = KvConfigOf(config);
  report.variant = kv.ToString();
  // Stages: each mode x dtype, the cache check, fidelity, head diversity.
  const int64_t stages = static_cast<int64_t>(dtypes.size() * modes.size()) + 2 +
                         (o.source.empty() ? 0 : 1);
  int64_t stage = 0;
  auto progress = [&](const std::string& what) {
    if (o.on_progress) o.on_progress(what, ++stage, stages);
  };
  for (at::ScalarType dtype : dtypes) {
    EquivalenceOptions eo;
    eo.prompt = prompt;
    eo.decode_tokens = o.decode_tokens;
    eo.cache_dtype = dtype;
    eo.should_stop = o.should_stop;
    const bool all =
        std::find(o.modes.begin(), o.modes.end(), "all") != o.modes.end();
    // One run of the reference engines serves every mode of this dtype.
    ASSIGN_OR_RETURN(auto references,
                     ReferenceEngines::Create(config, weights, dtype,
                                              o.prompt_tokens + o.decode_tokens,
                                              eo.factored_layout));
    eo.references = references.get();
    for (DecodeMode mode : modes) {
      progress(absl::StrCat(DecodeModeName(mode), " ",
                            dtype == at::kBFloat16 ? "bf16" : "fp32", " decoding vs the f64 "
                            "reference"));
      ASSIGN_OR_RETURN(auto r, CheckEquivalence(config, weights, mode, eo));
      r.required = !all;
      // Under "all" naive is the negative control; asked for by name it is the
      // user's question (is naive decoding of this model exact?), answered
      // with a failure when it is not.
      r.expected_equivalent = mode != DecodeMode::kNaive || !all;
      report.equivalence.push_back(std::move(r));
    }
  }
  // Cache bytes (fp32 storage) of every applicable engine after prompt + decode
  // tokens. The fp32 equivalence runs already decoded exactly that: their
  // engines' bytes are used, and an engine is run here only when no fp32 check
  // ran it.
  const int64_t tokens = o.prompt_tokens + o.decode_tokens;
  auto run_fp32 = [&](DecodeMode mode) -> absl::StatusOr<CacheBytes> {
    at::NoGradGuard no_grad;
    EngineOptions eo;
    eo.capacity = tokens;
    ASSIGN_OR_RETURN(auto engine,
                     CreateDecodeEngine(config, weights, mode, eo));
    for (int64_t t = 0; t < tokens; ++t) {
      engine->Step(at::full({1}, prompt[t % prompt.size()], at::kLong));
    }
    const CacheMeasurement m = engine->MeasureCache();
    return CacheBytes{m.used_bytes, m.allocated_bytes};
  };
  auto add_check = [&](DecodeMode mode, const CacheBytes& bytes) {
    CacheCheck c;
    c.engine = DecodeModeName(mode);
    // The expanded engine of a factored model holds the materialised per-head
    // cache.
    KvConfig engine_kv = kv;
    if (mode == DecodeMode::kExpanded && config.kv.layout != KvLayout::kDense) {
      engine_kv = KvConfig();
      engine_kv.variant = config.num_kv_heads == config.num_heads
                              ? KvVariant::kMha
                              : KvVariant::kGqa;
      engine_kv.kv_heads = config.num_kv_heads;
    }
    c.variant = engine_kv.ToString();
    c.tokens = tokens;
    c.used_bytes = bytes.used;
    c.allocated_bytes = bytes.allocated;
    c.formula_bytes = static_cast<int64_t>(
        MeasureFootprint(ShapeOf(config), engine_kv, tokens, 1, 4).bytes);
    if (mode == DecodeMode::kExpanded && config.kv.DecoupledRope()) {
      // Each KV head's key is [RoPE-free | the shared rotated key]: w more per head.
      const int64_t w = config.kv.RopeWidth();
      c.variant = absl::StrCat(c.variant, ", keys +", w, " rotated dims each");
      c.formula_bytes += config.num_layers * tokens * config.num_kv_heads * w * 4;
    }
    report.cache.push_back(c);
  };
  progress("cache bytes against the formula");
  std::optional<CacheBytes> expanded_bytes;
  std::vector<std::pair<DecodeMode, CacheBytes>> factored;
  for (const auto& r : report.equivalence) {
    if (!r.applicable || r.dtype != "fp32") continue;
    ASSIGN_OR_RETURN(DecodeMode mode, ParseDecodeMode(r.mode));
    factored.emplace_back(mode, r.candidate_cache);
    expanded_bytes = r.reference_cache;  // fp32 checks run the expanded engine
  }
  if (factored.empty()) {  // bf16 only: no fp32 run to read
    for (const auto& r : report.equivalence) {
      if (!r.applicable) continue;
      ASSIGN_OR_RETURN(DecodeMode mode, ParseDecodeMode(r.mode));
      ASSIGN_OR_RETURN(CacheBytes bytes, run_fp32(mode));
      factored.emplace_back(mode, bytes);
    }
  }
  if (!expanded_bytes) {
    ASSIGN_OR_RETURN(expanded_bytes, run_fp32(DecodeMode::kExpanded));
  }
  add_check(DecodeMode::kExpanded, *expanded_bytes);
  for (const auto& [mode, bytes] : factored) add_check(mode, bytes);
  // Head diversity of the converted model's (materialised) heads, and the
  // source's.
  auto diversity_of = [](const ModelConfig& c, const LlamaWeights& w) {
    double centred = 0, uncentred = 0;
    for (const auto& l : w.layers) {
      const DenseKv dense = ExpandKv(c, l);
      const HeadDiversity d = MeasureHeadDiversity(BilinearGram(
          l.wq, dense.wk, c.num_heads, c.num_kv_heads, c.head_dim));
      centred += d.centred;
      uncentred += d.uncentred;
    }
    const auto n = static_cast<double>(w.layers.size());
    return std::pair{centred / n, uncentred / n};
  };
  progress("head diversity");
  DiversityResult diversity;
  diversity.heads = config.num_heads;
  std::tie(diversity.converted_centred, diversity.converted_uncentred) =
      diversity_of(config, weights);
  if (!o.source.empty()) {
    ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> src_ckpt, Checkpoint::Open(o.source));
    ASSIGN_OR_RETURN(LlamaWeights src_weights, LoadLlamaWeights(src_ckpt, StoredDtype()));
    const ModelConfig& sc = src_ckpt->config();
    if (sc.num_layers != config.num_layers ||
        sc.hidden_size != config.hidden_size ||
        sc.vocab_size != config.vocab_size ||
        sc.num_heads != config.num_heads) {
      return Invalid(absl::StrCat(o.source,
                                  ": the source's shape (layers, width, heads, "
                                  "vocabulary) differs from ",
                                  o.checkpoint));
    }
    diversity.has_source = true;
    std::tie(diversity.source_centred, diversity.source_uncentred) =
        diversity_of(sc, src_weights);
    if (o.text.empty()) {
      report.fidelity_skipped = "no --text given (fidelity is measured on held-out text)";
    } else if (docs.empty()) {
      report.fidelity_skipped = absl::StrCat(o.text, " holds no document");
    } else if (tok == nullptr) {
      report.fidelity_skipped =
          absl::StrCat(o.checkpoint, " has no tokenizer to encode ", o.text, " with");
    }
    if (!docs.empty() && tok != nullptr) {
      progress(absl::StrCat("fidelity to the source on ", o.fidelity_tokens, " positions at most"));
      ASSIGN_OR_RETURN(auto source_model,
                       Transformer::Create(sc, std::move(src_weights)));
      ASSIGN_OR_RETURN(auto converted_model,
                       Transformer::Create(config, weights));
      RETURN_IF_ERROR(CheckStop(o.should_stop, "verification (fidelity)"));
      ASSIGN_OR_RETURN(report.fidelity,
                       MeasureFidelity(*source_model, *converted_model, *tok,
                                       docs, o.fidelity_tokens));
    }
  }
  report.diversity = diversity;
  return report;
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
    return Invalid(absl::StrCat("--dtype '", o.dtype, "' must be fp32, bf16 or both"));
  }
  if (o.modes.empty()) return Invalid("--rope-mode lists no mode");
  for (const auto& name : o.modes) {
    auto m = ParseDecodeMode(name);
    if (name != "all" && (!m.ok() || *m == DecodeMode::kExpanded)) {
      return Invalid(absl::StrCat("--rope-mode '", name,
                                  "' must be reconstruct, plane, partial, naive or all"));
    }
  }
  if (o.fidelity_tokens < 1 || o.fidelity_tokens > (int64_t{1} << 20)) {
    return Invalid(absl::StrCat("--fidelity-tokens ", o.fidelity_tokens,
                                " must lie in [1, 1048576]"));
  }
  if (!o.text.empty()) return CheckTextFile(o.text, "--text");
  return absl::OkStatus();
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
