// `lrkv heal` as a job (see heal_job.h).
#include "train/heal_job.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "model/llama_weights.h"
#include "model/perplexity.h"
#include "model/safetensors.h"
#include "model/status_macros.h"
#include "model/text_corpus.h"
#include "model/transformer.h"
#include "train/healer.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;

absl::Status Invalid(const std::string& m) { return absl::InvalidArgumentError(m); }

absl::StatusOr<TokenDataset> LoadData(const std::string& path, const DocumentRange& range,
                                      const Tokenizer& tok, int64_t vocab, int64_t seq_len,
                                      const char* what) {
  if (absl::EndsWith(path, ".u16") || absl::EndsWith(path, ".u32")) {
    return TokenDataset::FromTokenFile(path, absl::EndsWith(path, ".u32") ? 4 : 2,
                                       tok.document_start_id(), vocab, seq_len);
  }
  ASSIGN_OR_RETURN(auto docs, ReadDocuments(path));
  auto slice = range.Slice(docs);
  if (slice.empty()) return Invalid(absl::StrCat(what, ": the range selects no document"));
  auto data = TokenDataset::FromDocuments(slice, tok, seq_len);
  if (!data.ok()) return Invalid(absl::StrCat(path, ": ", data.status().message()));
  return data;
}

absl::StatusOr<HealReport> Run(const HealJobOptions& o,
                               const std::function<void(const HealEvent&)>& on_event) {
  RETURN_IF_ERROR(o.heal.Validate());
  RETURN_IF_ERROR(o.distributed.Validate(o.heal.batch));
  const bool lead = o.distributed.rank == 0;
  if (o.out_dir.empty()) return Invalid("--out is required");
  std::error_code ec;
  if (lead && fs::exists(o.out_dir, ec) && !fs::is_empty(o.out_dir, ec)) {
    return Invalid(absl::StrCat(o.out_dir, ": output folder exists and is not empty"));
  }
  if (o.seq_len < 2) return Invalid(absl::StrCat("--seq-len ", o.seq_len, " must be >= 2"));
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(o.checkpoint));
  RETURN_IF_ERROR(ckpt->RequireTokenizer().status());
  const ModelConfig& config = ckpt->config();
  if (o.seq_len > config.max_position_embeddings) {
    return Invalid(absl::StrCat("--seq-len ", o.seq_len, " exceeds the model's context of ",
                                config.max_position_embeddings));
  }
  std::optional<std::pair<ModelConfig, LlamaWeights>> teacher;
  if (!o.teacher.empty()) {
    ASSIGN_OR_RETURN(auto tckpt, Checkpoint::Open(o.teacher));
    ASSIGN_OR_RETURN(LlamaWeights tw, LoadLlamaWeights(*tckpt));
    teacher.emplace(tckpt->config(), std::move(tw));
  }
  const Tokenizer& tok = *ckpt->tokenizer();
  ASSIGN_OR_RETURN(TokenDataset train,
                   LoadData(o.data, o.data_range, tok, config.vocab_size, o.seq_len, "--data"));
  std::optional<TokenDataset> eval;
  std::vector<std::string> eval_docs;
  if (!o.eval.empty()) {
    ASSIGN_OR_RETURN(auto docs, ReadDocuments(o.eval));
    eval_docs = o.eval_range.Slice(docs);
    ASSIGN_OR_RETURN(eval, LoadData(o.eval, o.eval_range, tok, config.vocab_size, o.seq_len,
                                    "--eval"));
  }
  ASSIGN_OR_RETURN(LlamaWeights weights, LoadLlamaWeights(*ckpt));
  HealReport report;
  report.checkpoint = o.checkpoint;
  report.teacher = o.teacher;
  if (!lead) eval_docs.clear();  // only rank 0 measures and writes
  if (!eval_docs.empty()) {
    ASSIGN_OR_RETURN(auto before, Transformer::Create(config, weights));
    ASSIGN_OR_RETURN(auto stats, MeasurePerplexity(*before, tok, eval_docs));
    report.perplexity_before = stats.perplexity();
    report.eval_tokens = stats.tokens;
    if (teacher) {
      ASSIGN_OR_RETURN(auto t, Transformer::Create(teacher->first, teacher->second));
      ASSIGN_OR_RETURN(auto ts, MeasurePerplexity(*t, tok, eval_docs));
      report.teacher_perplexity = ts.perplexity();
    }
  }
  ASSIGN_OR_RETURN(auto healer, Healer::Create(config, std::move(weights), std::move(teacher),
                                               std::move(train), std::move(eval), o.heal,
                                               o.distributed));
  report.trainable_parameters = healer->trainable_parameters();
  if (!o.resume.empty()) RETURN_IF_ERROR(healer->LoadCheckpoint(o.resume));
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(healer->Run([&](const HealEvent& e) {
    report.events.push_back(e);
    report.tokens_seen = e.tokens_seen;
    if (on_event) on_event(e);
  }));
  report.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.steps = healer->step();
  // Measured and written from the CPU, whichever device trained.
  const LlamaWeights healed = ToDevice(healer->weights(), at::kCPU);
  if (!eval_docs.empty()) {
    ASSIGN_OR_RETURN(auto after, Transformer::Create(healer->config(), healed));
    ASSIGN_OR_RETURN(auto stats, MeasurePerplexity(*after, tok, eval_docs));
    report.perplexity_after = stats.perplexity();
  }
  if (!lead) return report;
  // The healed checkpoint, written whole into a temporary folder and renamed.
  RETURN_IF_ERROR(WriteDirectoryAtomically(o.out_dir, [&](const std::string& dir) {
    RETURN_IF_ERROR(SaveSafetensorsCheckpoint(dir, healer->config(), healed, &tok));
    return WriteFileAtomically((fs::path(dir) / "heal_report.json").string(),
                               report.ToJson().dump(2) + "\n");
  }));
  return report;
}

}  // namespace

nlohmann::json HealReport::ToJson() const {
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& e : events) curve.push_back(e.ToJson());
  nlohmann::json j = {{"checkpoint", checkpoint},      {"teacher", teacher},
                      {"steps", steps},                {"tokens_seen", tokens_seen},
                      {"trainable_parameters", trainable_parameters},
                      {"wall_seconds", wall_seconds},  {"eval_tokens", eval_tokens},
                      {"curve", curve}};
  if (perplexity_before) j["perplexity_before"] = *perplexity_before;
  if (perplexity_after) j["perplexity_after"] = *perplexity_after;
  if (teacher_perplexity) j["teacher_perplexity"] = *teacher_perplexity;
  return j;
}

absl::StatusOr<HealReport> RunHealJob(const HealJobOptions& options,
                                      const std::function<void(const HealEvent&)>& on_event) {
  try {
    return Run(options, on_event);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("heal: ", e.what_without_backtrace()));
  }
}

}  // namespace lrkv
