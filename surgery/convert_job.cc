// A whole conversion as users run it (see convert_job.h). LibTorch errors are
// caught here, at the library's edge.
#include "surgery/convert_job.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "exports/gguf_export.h"
#include "formats/safetensors.h"
#include "formats/text_corpus.h"
#include "model/checkpoint.h"
#include "runtime/deepseek_layout.h"
#include "runtime/language_model.h"
#include "runtime/llama_weights.h"
#include "runtime/perplexity.h"
#include "runtime/transformer.h"
#include "surgery/calibration.h"
#include "surgery/converter.h"
#include "surgery/kv_scheme.h"
#include "surgery/kv_variant.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;

absl::Status Invalid(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

absl::StatusOr<double> Perplexity(const Transformer& model,
                                  const Tokenizer& tokenizer,
                                  const std::vector<std::string>& docs,
                                  int64_t* tokens, const StopCheck& stop) {
  ASSIGN_OR_RETURN(PerplexityStats stats,
                   MeasurePerplexity(model, tokenizer, docs, stop));
  *tokens = stats.tokens;
  return stats.perplexity();
}

absl::Status CheckOutputDir(const std::string& out) {
  if (out.empty()) return Invalid("--out is required");
  std::error_code ec;
  if (fs::exists(out, ec) &&
      !(fs::is_directory(out, ec) && fs::is_empty(out, ec))) {
    return Invalid(
        absl::StrCat(out, ": output folder exists and is not empty"));
  }
  // Missing parent folders are made when the output is written; what exists of
  // the path must be folders.
  for (fs::path p = fs::absolute(out, ec).parent_path(); !p.empty();
       p = p.parent_path()) {
    if (fs::exists(p, ec)) {
      if (!fs::is_directory(p, ec)) {
        return Invalid(
            absl::StrCat(p.string(), ": not a folder (in --out ", out, ")"));
      }
      break;
    }
    if (p == p.parent_path()) break;
  }
  return absl::OkStatus();
}

// Whether per-layer sizes may be judged by the loss on calibration text (the
// auto and loss objectives, with --calib given): the job then reads the text
// and probes the source with it.
bool ProbesLoss(const ConvertJobOptions& o) {
  return o.conversion.allocation == SizeAllocation::kLayers &&
         !o.calib_path.empty() &&
         o.conversion.allocation_objective != AllocationObjective::kError;
}

// Whole documents from the start of the calibration range, until `tokens` are
// predicted.
std::vector<std::string> ProbeDocuments(
    const std::vector<std::string>& calib_docs, const Tokenizer& tok,
    int64_t tokens) {
  std::vector<std::string> docs;
  int64_t n = 0;
  for (const std::string& doc : calib_docs) {
    if (n >= tokens) break;
    docs.push_back(doc);
    n += static_cast<int64_t>(tok.Encode(doc).size());
  }
  return docs;
}

// The loss probe of per-layer sizes by loss: the mean NLL on `docs` of the
// source with each layer's K/V replaced; `*tokens` receives the tokens each
// probe predicted.
KvLossProbe MakeLossProbe(const ModelConfig& config,
                          const LlamaWeights& weights, const Tokenizer& tok,
                          std::vector<std::string> docs, const StopCheck& stop,
                          int64_t* tokens) {
  return [&config, &weights, &tok, docs = std::move(docs), stop,
          tokens](const std::vector<DenseKv>& kv) -> absl::StatusOr<double> {
    LlamaWeights w = weights;  // tensors shared, not copied
    for (size_t i = 0; i < kv.size() && i < w.layers.size(); ++i) {
      LayerWeights& l = w.layers[i];
      l.wk = kv[i].wk;
      l.bk = kv[i].bk;
      l.wv = kv[i].wv;
      l.bv = kv[i].bv;
    }
    ASSIGN_OR_RETURN(auto model, Transformer::Create(config, std::move(w)));
    ASSIGN_OR_RETURN(PerplexityStats stats,
                     MeasurePerplexity(*model, tok, docs, stop));
    *tokens = stats.tokens;
    return stats.mean_nll();
  };
}

// Writes the converted checkpoint (safetensors, GGUF or DeepSeek's layout) and
// its report into o.out_dir: whole, into a temporary folder renamed at the end.
absl::Status WriteConverted(const ConvertJobOptions& o,
                            const ConvertedModel& converted,
                            const Tokenizer& tok, DType matrices,
                            std::chrono::steady_clock::time_point t_start,
                            ConversionReport* report) {
  std::error_code ec;
  const fs::path parent = fs::absolute(o.out_dir, ec).parent_path();
  fs::create_directories(parent, ec);
  if (ec)
    return Invalid(
        absl::StrCat(parent.string(), ": cannot create: ", ec.message()));
  return WriteDirectoryAtomically(o.out_dir, [&](const std::string& dir) {
    if (o.format == "gguf") {
      std::error_code mkdir_ec;
      fs::create_directories(dir, mkdir_ec);
      RETURN_IF_ERROR(SaveGgufCheckpoint(
          (fs::path(dir) / kGgufExportFileName).string(), converted.config,
          converted.weights, tok, matrices));
    } else if (o.format == "deepseek") {
      RETURN_IF_ERROR(SaveDeepseekCheckpoint(dir, converted.config,
                                             converted.weights, &tok, matrices,
                                             o.max_shard_bytes));
    } else {
      RETURN_IF_ERROR(SaveSafetensorsCheckpoint(dir, converted.config,
                                                converted.weights, &tok,
                                                matrices, o.max_shard_bytes));
    }
    report->total_seconds = std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - t_start)
                                .count();
    RETURN_IF_ERROR(
        WriteFileAtomically((fs::path(dir) / "report.json").string(),
                            report->ToJson().dump(2) + "\n"));
    return WriteFileAtomically((fs::path(dir) / "report.txt").string(),
                               report->ToTable());
  });
}

absl::StatusOr<ConversionReport> Run(const ConvertJobOptions& o) {
  const auto t_start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
        .count();
  };
  RETURN_IF_ERROR(CheckOutputDir(o.out_dir));
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt,
                   Checkpoint::Open(o.checkpoint));
  const ModelConfig& config = ckpt->config();
  // Every option is checked before any heavy work or any write.
  RETURN_IF_ERROR(ValidateConvertJobOptions(o, *ckpt));
  const bool activation = o.conversion.metric == SurgeryMetric::kActivation;
  // Unset ("auto"): the source's, once its weights are loaded.
  std::optional<DType> matrices;
  if (o.weight_dtype != "auto") matrices = ParseWeightDType(o.weight_dtype);
  const bool probe_loss = ProbesLoss(o);
  // The latent norm's fit reads calibration inputs when text is given.
  const bool norm_fit = o.conversion.latent_norm && !o.calib_path.empty();
  const bool calibrate = activation || norm_fit;
  std::vector<std::string> calib_docs, eval_docs;
  if (calibrate || probe_loss) {
    ASSIGN_OR_RETURN(auto docs, ReadDocuments(o.calib_path));
    calib_docs = o.calib_range.Slice(docs);
    if (calib_docs.empty()) return Invalid("--calib-range selects no document");
  }
  if (!o.eval_path.empty()) {
    ASSIGN_OR_RETURN(auto docs, ReadDocuments(o.eval_path));
    eval_docs = o.eval_range.Slice(docs);
    if (eval_docs.empty()) return Invalid("--eval-range selects no document");
  }
  // The source stays in its mapped file, in its stored dtype: only the K/V of
  // the layer being converted is widened (converter.cc), and every other tensor
  // is written from the map as it is.
  ASSIGN_OR_RETURN(LlamaWeights weights, LoadLlamaWeights(ckpt, StoredDtype()));
  if (!matrices) matrices = StoredMatrixDType(weights);
  ASSIGN_OR_RETURN(auto source, Transformer::Create(config, weights));

  ConversionReport report;
  report.source = o.checkpoint;
  report.output = o.out_dir;
  std::optional<CalibrationStats> calib;
  const int64_t stages =
      2 + (calibrate ? 1 : 0) + (o.eval_path.empty() ? 0 : 1);
  int64_t stage = 0;
  auto progress = [&](const std::string& what) {
    if (o.on_progress) o.on_progress(what, ++stage, stages);
  };
  if (calibrate) {
    progress(
        absl::StrCat("calibration on ", o.calib_tokens, " tokens at most"));
    const auto t = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(calib, CollectCalibration(
                                *source, *ckpt->tokenizer(), calib_docs,
                                o.calib_tokens, o.should_stop,
                                norm_fit ? LatentNormSamples(config.hidden_size,
                                                             config.num_layers)
                                         : 0));
    report.calibration_seconds = since(t);
  }
  KvLossProbe loss_probe;
  int64_t probe_tokens = 0;
  if (probe_loss) {
    loss_probe = MakeLossProbe(
        config, weights, *ckpt->tokenizer(),
        ProbeDocuments(calib_docs, *ckpt->tokenizer(), o.allocation_tokens),
        o.should_stop, &probe_tokens);
  }
  progress(absl::StrCat("decomposition of ", config.num_layers, " layers"));
  ASSIGN_OR_RETURN(
      ConvertedModel converted,
      ConvertModel(config, weights, o.conversion, calib ? &*calib : nullptr,
                   &report, o.should_stop, loss_probe, o.on_layer));
  if (report.allocation == SizeAllocation::kLayers &&
      report.allocation_objective == AllocationObjective::kLoss) {
    report.allocation_loss_tokens = probe_tokens;
  }
  converted.weights =
      MatricesIn(converted.config, converted.weights, *matrices);
  if (!eval_docs.empty()) {
    progress(absl::StrCat("perplexity before and after on ", eval_docs.size(),
                          " documents"));
    const auto t = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(report.perplexity_before,
                     Perplexity(*source, *ckpt->tokenizer(), eval_docs,
                                &report.eval_tokens, o.should_stop));
    ASSIGN_OR_RETURN(auto after,
                     Transformer::Create(converted.config, converted.weights));
    ASSIGN_OR_RETURN(report.perplexity_after,
                     Perplexity(*after, *ckpt->tokenizer(), eval_docs,
                                &report.eval_tokens, o.should_stop));
    report.evaluation_seconds = since(t);
  }
  if (o.expand) converted = ExpandModel(converted.config, converted.weights);
  RETURN_IF_ERROR(CheckStop(o.should_stop, "conversion (before writing)"));
  progress(absl::StrCat("writing ", o.out_dir));
  RETURN_IF_ERROR(WriteConverted(o, converted, *ckpt->tokenizer(), *matrices,
                                 t_start, &report));
  return report;
}

}  // namespace

int64_t LatentNormSamples(int64_t hidden_size, int64_t num_layers) {
  constexpr int64_t kBytes = int64_t{256} << 20;
  const int64_t fit = kBytes / (4 * std::max<int64_t>(1, hidden_size) *
                                std::max<int64_t>(1, num_layers));
  return std::clamp<int64_t>(fit, 1024, 8192);
}

RopeMode AutoRopeMode(const ConversionOptions& c) {
  return KvVariantTypeOf(c.variant).DefaultRopeMode(c);
}

bool DeepseekFormat(const ConvertJobOptions& o) {
  return o.format == "gguf" || o.format == "deepseek";
}

ConvertJobOptions WithAutoResolved(ConvertJobOptions o) {
  const KvVariantType& variant = KvVariantTypeOf(o.conversion.variant);
  const bool deepseek_mla =
      variant.deepseek_layout() && DeepseekFormat(o) && !o.expand;
  o.conversion.rope_mode = o.rope_mode.value_or(
      deepseek_mla ? RopeMode::kPartial : AutoRopeMode(o.conversion));
  o.rope_mode = o.conversion.rope_mode;
  o.conversion.latent_norm = o.latent_norm.value_or(
      deepseek_mla && variant.CachesRopeDims(o.conversion.rope_mode));
  o.latent_norm = o.conversion.latent_norm;
  return o;
}

absl::Status ValidateConvertJobOptions(const ConvertJobOptions& asked,
                                       const Checkpoint& source) {
  const ConvertJobOptions o = WithAutoResolved(asked);
  // The target resolved and its scheme found, as the conversion will (an
  // impossible size or budget is refused here, before any work).
  ASSIGN_OR_RETURN(const std::unique_ptr<KvScheme> scheme,
                   MakeKvScheme(source.config(), o.conversion));
  const bool activation = o.conversion.metric == SurgeryMetric::kActivation;
  if (activation && o.calib_path.empty()) {
    return Invalid("--metric activation needs --calib FILE");
  }
  if (o.conversion.allocation == SizeAllocation::kLayers &&
      o.conversion.allocation_objective == AllocationObjective::kLoss &&
      o.calib_path.empty()) {
    return Invalid(
        "--allocation-objective loss measures each layer's loss on calibration "
        "text: give --calib FILE");
  }
  if (o.allocation_tokens < 1 || o.allocation_tokens > kMaxCalibrationTokens) {
    return Invalid(absl::StrCat("--allocation-tokens ", o.allocation_tokens,
                                " must lie in [1, ", kMaxCalibrationTokens,
                                "]"));
  }
  if (o.calib_tokens < 1 || o.calib_tokens > kMaxCalibrationTokens) {
    return Invalid(absl::StrCat("--calib-tokens ", o.calib_tokens,
                                " must lie in [1, ", kMaxCalibrationTokens,
                                "]"));
  }
  const bool gguf = o.format == "gguf";
  if (!gguf && o.format != "safetensors" && o.format != "deepseek") {
    return Invalid(absl::StrCat("--format '", o.format,
                                "' is not one of safetensors, gguf, deepseek"));
  }
  const KvVariantType& variant = KvVariantTypeOf(o.conversion.variant);
  const bool decoupled_rope = variant.CachesRopeDims(o.conversion.rope_mode);
  if (DeepseekFormat(o) && variant.deepseek_layout() && !o.expand &&
      !o.conversion.latent_norm) {
    return Invalid(absl::StrCat(
        "--format ", o.format, ": ",
        gguf ? "llama.cpp's deepseek2" : "stock DeepSeek-V3",
        " always applies the latent's RMSNorm (kv_a_layernorm): convert with "
        "--latent-norm"));
  }
  if (o.format == "deepseek") {
    if (!variant.deepseek_layout() || !decoupled_rope || o.expand) {
      return Invalid(
          "--format deepseek writes MLA with decoupled RoPE: convert with "
          "--variant mla --rope-mode partial (and without --expand)");
    }
    if (o.conversion.allocation == SizeAllocation::kLayers) {
      return Invalid(
          "--format deepseek: DeepSeek's layout has one kv_lora_rank for every "
          "layer (use --allocation uniform)");
    }
    // The converted model's config: can the layout hold it?
    RETURN_IF_ERROR(CheckDeepseekExport(scheme->converted_config()));
  }
  if (o.weight_dtype != "auto" && !ParseWeightDType(o.weight_dtype)) {
    return Invalid(absl::StrCat("--weight-dtype '", o.weight_dtype,
                                "' is not one of auto, f32, f16, bf16"));
  }
  if (o.max_shard_bytes == 0)
    return Invalid("--max-shard-size must be positive");
  if (o.expand && decoupled_rope) {
    return Invalid(
        "--expand: MLA with decoupled RoPE has keys of d_h + d_rope dims (a "
        "RoPE-free part and a rotated part all heads share), which no dense "
        "Llama layout holds; write it as MLA (--format safetensors, gguf or "
        "deepseek)");
  }
  if (gguf) {
    // What the writer would refuse after the decomposition, refused before it.
    const ModelConfig& converted = scheme->converted_config();
    RETURN_IF_ERROR(
        CheckGgufExportable(o.expand ? ExpandedConfig(converted) : converted));
  }
  if (activation || !o.eval_path.empty() || gguf || ProbesLoss(o)) {
    RETURN_IF_ERROR(source.RequireTokenizer().status());
  }
  if (!o.calib_path.empty())
    RETURN_IF_ERROR(CheckTextFile(o.calib_path, "--calib"));
  if (!o.eval_path.empty())
    RETURN_IF_ERROR(CheckTextFile(o.eval_path, "--eval"));
  return absl::OkStatus();
}

absl::StatusOr<ConversionReport> RunConvertJob(
    const ConvertJobOptions& options) {
  try {
    return Run(WithAutoResolved(options));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("conversion failed in LibTorch: ",
                                            e.what_without_backtrace()));
  }
}

absl::StatusOr<ConversionReport> RunConvertBench(const ConvertBenchOptions& o) {
  ModelConfig c;
  c.hidden_size = o.hidden;
  c.intermediate_size = 1;
  c.num_layers = o.layers;
  c.num_heads = o.heads;
  c.num_kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
  c.head_dim = o.head_dim;
  c.rope_dim = o.head_dim;
  c.vocab_size = 16;
  RETURN_IF_ERROR(c.Validate());
  if (o.conversion.metric != SurgeryMetric::kWeight) {
    return Invalid("the conversion benchmark uses the weight metric");
  }
  try {
    const LlamaWeights w = RandomLlamaWeights(c, o.seed);
    ConversionReport report;
    report.source = absl::StrCat(
        "random ", o.layers, "-layer model, d=", o.hidden, ", H=", o.heads,
        ", H_kv=", c.num_kv_heads, ", d_h=", o.head_dim);
    RETURN_IF_ERROR(
        ConvertModel(c, w, o.conversion, nullptr, &report).status());
    return report;
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  }
}

}  // namespace lrkv
