// `lrkv heal` as a job (see heal_job.h).
#include "train/heal_job.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "formats/safetensors.h"
#include "formats/text_corpus.h"
#include "model/checkpoint.h"
#include "runtime/llama_weights.h"
#include "runtime/perplexity.h"
#include "runtime/transformer.h"
#include "train/healer.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;

absl::Status Invalid(const std::string& m) {
  return absl::InvalidArgumentError(m);
}

absl::StatusOr<TokenDataset> LoadData(const std::string& path,
                                      const DocumentRange& range,
                                      const Tokenizer& tok, int64_t vocab,
                                      int64_t seq_len, const char* what) {
  if (absl::EndsWith(path, ".u16") || absl::EndsWith(path, ".u32")) {
    return TokenDataset::FromTokenFile(path,
                                       absl::EndsWith(path, ".u32") ? 4 : 2,
                                       tok.document_start_id(), vocab, seq_len);
  }
  ASSIGN_OR_RETURN(auto docs, ReadDocuments(path));
  auto slice = range.Slice(docs);
  if (slice.empty())
    return Invalid(absl::StrCat(what, ": the range selects no document"));
  auto data = TokenDataset::FromDocuments(slice, tok, seq_len);
  if (!data.ok())
    return Invalid(absl::StrCat(path, ": ", data.status().message()));
  return data;
}

int64_t MachineMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.2f GiB", bytes / 1073741824.0);
}

// The estimate of EstimateHealMemory from the opened checkpoints.
HealMemoryEstimate Estimate(const HealJobOptions& o, const Checkpoint& student,
                            const Checkpoint* teacher) {
  HealMemoryEstimate m;
  const ModelConfig& c = student.config();
  int64_t largest = 0;
  for (const TensorView& t : student.tensors()) {
    m.weight_bytes += static_cast<int64_t>(t.nbytes);
    largest = std::max(largest, t.numel());
    // The tensors each --trainable set names (TrainableTensors in healer.cc),
    // by name.
    const bool attention = absl::StrContains(t.name, ".self_attn.");
    const bool kv = attention && !absl::StrContains(t.name, "q_proj") &&
                    !absl::StrContains(t.name, "o_proj") &&
                    !absl::StrContains(t.name, "_norm");
    const bool trained =
        o.heal.trainable == TrainableSet::kAll ||
        (o.heal.trainable == TrainableSet::kAttn && attention) || kv;
    if (trained) m.trainable_parameters += t.numel();
  }
  if (teacher != nullptr) {
    for (const TensorView& t : teacher->tensors())
      m.weight_bytes += static_cast<int64_t>(t.nbytes);
  }
  // fp32 copy, gradient, two AdamW moments; keep_best's copy of the best
  // parameters.
  m.optimizer_bytes = (o.heal.keep_best ? 20 : 16) * m.trainable_parameters;
  // Per token and layer: the saved inputs of the projections, norms and SwiGLU
  // (~12 d + 4 ff floats), the attention probabilities (H x seq), and the
  // logits with their softmax and gradient (student and teacher: ~4 V floats
  // per token). With activation checkpointing, each layer's input (d floats a
  // token) and one layer's activations at a time.
  const int64_t tokens = o.heal.batch * o.seq_len;
  const int64_t per_layer =
      12 * c.hidden_size + 4 * c.intermediate_size + c.num_heads * o.seq_len;
  m.activation_bytes = 4 * tokens *
                       ((o.heal.activation_checkpointing
                             ? c.num_layers * c.hidden_size + per_layer
                             : c.num_layers * per_layer) +
                        4 * c.vocab_size);
  m.transient_bytes = 2 * 4 * largest;
  m.total_bytes = m.weight_bytes + m.optimizer_bytes + m.activation_bytes +
                  m.transient_bytes;
  m.machine_bytes =
      o.memory_limit_bytes > 0 ? o.memory_limit_bytes : MachineMemoryBytes();
  return m;
}

}  // namespace

absl::Status ValidateHealJobOptions(const HealJobOptions& o) {
  RETURN_IF_ERROR(o.heal.Validate());
  RETURN_IF_ERROR(o.distributed.Validate(o.heal.batch));
  if (o.seq_len < 2)
    return Invalid(absl::StrCat("--seq-len ", o.seq_len, " must be >= 2"));
  if (o.heal.loss != HealLoss::kLm && o.teacher.empty()) {
    return Invalid(
        "a kd or kd+lm loss needs a --teacher (the model the student learns "
        "from)");
  }
  RETURN_IF_ERROR(CheckTextFile(o.data, "--data"));
  if (!o.eval.empty()) RETURN_IF_ERROR(CheckTextFile(o.eval, "--eval"));
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt,
                   Checkpoint::Open(o.checkpoint));
  RETURN_IF_ERROR(ckpt->RequireTokenizer().status());
  const ModelConfig& config = ckpt->config();
  if (o.seq_len > config.max_position_embeddings) {
    return Invalid(absl::StrCat("--seq-len ", o.seq_len,
                                " exceeds the model's context of ",
                                config.max_position_embeddings));
  }
  std::shared_ptr<const Checkpoint> tckpt;
  if (!o.teacher.empty()) {
    ASSIGN_OR_RETURN(tckpt, Checkpoint::Open(o.teacher));
  }
  // Refused up front, before any weight is read, when it cannot fit.
  const HealMemoryEstimate memory = Estimate(o, *ckpt, tckpt.get());
  if (memory.machine_bytes > 0 && memory.total_bytes > memory.machine_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this heal needs about ", memory.ToString(), "; it does not fit: ",
        o.heal.trainable == TrainableSet::kKv
            ? ""
            : "train fewer tensors (--trainable kv), ",
        "use a shorter --seq-len or a smaller --batch, or a larger machine"));
  }
  return absl::OkStatus();
}

namespace {

// The rows that judge keep-best's candidates (the last tenth of --data, at most
// eval_rows, held out from training; selecting the step on the text the final
// perplexity is measured on would make that figure optimistic), else --eval's.
absl::StatusOr<std::optional<TokenDataset>> ValidationData(
    const HealJobOptions& o, const Tokenizer& tok, int64_t vocab_size,
    TokenDataset* train, int64_t* validation_rows) {
  if (o.heal.keep_best) {
    *validation_rows = std::min(o.heal.eval_rows, train->rows() / 10);
    if (*validation_rows < 1) {
      return Invalid(absl::StrCat(
          "--data packs into ", train->rows(), " rows of ", o.seq_len,
          " tokens: too few to hold a tenth out for choosing the best "
          "step (keep-best); give more data or --no-keep-best"));
    }
    return std::optional<TokenDataset>(train->HoldOut(*validation_rows));
  }
  if (o.eval.empty()) return std::optional<TokenDataset>();
  ASSIGN_OR_RETURN(
      TokenDataset eval,
      LoadData(o.eval, o.eval_range, tok, vocab_size, o.seq_len, "--eval"));
  return std::optional<TokenDataset>(std::move(eval));
}

// The run's settings as the report records them.
nlohmann::json SettingsJson(const HealJobOptions& o, int64_t validation_rows) {
  const HealOptions& h = o.heal;
  return {{"steps", h.steps},
          {"batch", h.batch},
          {"accum", h.grad_accum},
          {"seq_len", o.seq_len},
          {"lr", h.lr},
          {"min_lr_ratio", h.min_lr_ratio},
          {"warmup", h.WarmupSteps()},
          {"weight_decay", h.weight_decay},
          {"clip", h.clip},
          {"trainable", TrainableSetName(h.trainable)},
          {"loss", HealLossName(h.loss)},
          {"temperature", h.temperature},
          {"eval_every", h.eval_every},
          {"eval_rows", h.eval_rows},
          {"activation_checkpointing", h.activation_checkpointing},
          {"keep_best", h.keep_best},
          {"validation_rows", validation_rows},
          {"seed", h.seed},
          {"data", o.data},
          {"eval", o.eval},
          {"world_size", o.distributed.world_size},
          {"resume", o.resume}};
}

// The student's perplexity on --eval before healing, and the teacher's.
absl::Status PerplexityBefore(
    const ModelConfig& config, const LlamaWeights& weights,
    const std::optional<std::pair<ModelConfig, LlamaWeights>>& teacher,
    const Tokenizer& tok, const std::vector<std::string>& eval_docs,
    const std::function<void(const std::string&)>& phase, HealReport* report) {
  phase(absl::StrCat("perplexity before healing on ", eval_docs.size(),
                     " --eval documents"));
  ASSIGN_OR_RETURN(auto before, Transformer::Create(config, weights));
  ASSIGN_OR_RETURN(auto stats, MeasurePerplexity(*before, tok, eval_docs));
  report->perplexity_before = stats.perplexity();
  report->eval_tokens = stats.tokens;
  if (teacher) {
    phase("the teacher's perplexity on the same documents");
    ASSIGN_OR_RETURN(auto t,
                     Transformer::Create(teacher->first, teacher->second));
    ASSIGN_OR_RETURN(auto ts, MeasurePerplexity(*t, tok, eval_docs));
    report->teacher_perplexity = ts.perplexity();
  }
  return absl::OkStatus();
}

absl::StatusOr<HealReport> Run(
    const HealJobOptions& o,
    const std::function<void(const HealEvent&)>& on_event) {
  const bool lead = o.distributed.rank == 0;
  const auto t_start = std::chrono::steady_clock::now();
  if (o.out_dir.empty()) return Invalid("--out is required");
  std::error_code ec;
  if (lead && fs::exists(o.out_dir, ec) && !fs::is_empty(o.out_dir, ec)) {
    return Invalid(
        absl::StrCat(o.out_dir, ": output folder exists and is not empty"));
  }
  RETURN_IF_ERROR(ValidateHealJobOptions(o));
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt,
                   Checkpoint::Open(o.checkpoint));
  const ModelConfig& config = ckpt->config();
  std::shared_ptr<const Checkpoint> tckpt;
  if (!o.teacher.empty()) {
    ASSIGN_OR_RETURN(tckpt, Checkpoint::Open(o.teacher));
  }
  const HealMemoryEstimate memory = Estimate(o, *ckpt, tckpt.get());
  std::optional<std::pair<ModelConfig, LlamaWeights>> teacher;
  if (tckpt != nullptr) {
    // The teacher is only ever run forward: its weights stay in the map, as
    // stored.
    ASSIGN_OR_RETURN(LlamaWeights tw, LoadLlamaWeights(tckpt, StoredDtype()));
    teacher.emplace(tckpt->config(), std::move(tw));
  }
  const Tokenizer& tok = *ckpt->tokenizer();
  ASSIGN_OR_RETURN(TokenDataset train,
                   LoadData(o.data, o.data_range, tok, config.vocab_size,
                            o.seq_len, "--data"));
  std::vector<std::string> eval_docs;
  if (!o.eval.empty()) {
    ASSIGN_OR_RETURN(auto docs, ReadDocuments(o.eval));
    eval_docs = o.eval_range.Slice(docs);
  }
  int64_t validation_rows = 0;
  ASSIGN_OR_RETURN(
      std::optional<TokenDataset> eval,
      ValidationData(o, tok, config.vocab_size, &train, &validation_rows));
  // The student too: the trained tensors become float32 copies
  // (Healer::Create), the frozen rest stays mapped in its stored dtype.
  ASSIGN_OR_RETURN(LlamaWeights weights, LoadLlamaWeights(ckpt, StoredDtype()));
  const DType stored = StoredMatrixDType(weights);
  HealReport report;
  report.memory = memory;
  report.checkpoint = o.checkpoint;
  report.teacher = o.teacher;
  report.settings = SettingsJson(o, validation_rows);
  if (!lead) eval_docs.clear();  // only rank 0 measures and writes
  const std::function<void(const std::string&)> phase =
      [&](const std::string& what) {
        if (lead && o.on_phase) o.on_phase(what);
      };
  if (!eval_docs.empty()) {
    RETURN_IF_ERROR(PerplexityBefore(config, weights, teacher, tok, eval_docs,
                                     phase, &report));
  }
  ASSIGN_OR_RETURN(
      auto healer,
      Healer::Create(config, std::move(weights), std::move(teacher),
                     std::move(train), std::move(eval), o.heal, o.distributed));
  report.trainable_parameters = healer->trainable_parameters();
  if (!o.resume.empty()) {
    ASSIGN_OR_RETURN(report.resume_note, healer->LoadCheckpoint(o.resume));
  }
  phase(absl::StrCat("training ", o.heal.steps, " steps"));
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(healer->Run([&](const HealEvent& e) {
    report.events.push_back(e);
    report.tokens_seen = e.tokens_seen;
    if (on_event) on_event(e);
  }));
  report.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  report.steps = healer->step();
  if (healer->kept_step() >= 0) {
    report.kept_step = healer->kept_step();
    report.kept_validation_loss = healer->kept_eval_loss();
    if (!std::isnan(healer->unhealed_eval_loss())) {
      report.unhealed_validation_loss = healer->unhealed_eval_loss();
    }
  }
  // Measured and written from the CPU, whichever device trained.
  // In the source's storage dtype, rounded before the evaluation so that the
  // reported perplexity is the written model's.
  const LlamaWeights healed = MatricesIn(
      healer->config(), ToDevice(healer->weights(), at::kCPU), stored);
  if (!eval_docs.empty()) {
    phase("perplexity after healing");
    ASSIGN_OR_RETURN(auto after, Transformer::Create(healer->config(), healed));
    ASSIGN_OR_RETURN(auto stats, MeasurePerplexity(*after, tok, eval_docs));
    report.perplexity_after = stats.perplexity();
  }
  if (!lead) return report;
  phase(absl::StrCat("writing ", o.out_dir));
  // The healed checkpoint, written whole into a temporary folder and renamed.
  RETURN_IF_ERROR(
      WriteDirectoryAtomically(o.out_dir, [&](const std::string& dir) {
        RETURN_IF_ERROR(SaveSafetensorsCheckpoint(dir, healer->config(), healed,
                                                  &tok, stored));
        report.total_seconds = std::chrono::duration<double>(
                                   std::chrono::steady_clock::now() - t_start)
                                   .count();
        return WriteFileAtomically(
            (fs::path(dir) / "heal_report.json").string(),
            report.ToJson().dump(2) + "\n");
      }));
  return report;
}

}  // namespace

std::string HealMemoryEstimate::ToString() const {
  return absl::StrCat(
      GiB(total_bytes), " (weights read each step ", GiB(weight_bytes), ", ",
      trainable_parameters,
      " trained parameters with gradients and "
      "AdamW moments ",
      GiB(optimizer_bytes), ", activations ", GiB(activation_bytes),
      ", widened weights ", GiB(transient_bytes), ")",
      machine_bytes > 0
          ? absl::StrCat(" of the ", GiB(machine_bytes), " allowed")
          : "");
}

absl::StatusOr<HealMemoryEstimate> EstimateHealMemory(const HealJobOptions& o) {
  RETURN_IF_ERROR(o.heal.Validate());
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(o.checkpoint));
  std::unique_ptr<Checkpoint> teacher;
  if (!o.teacher.empty()) {
    ASSIGN_OR_RETURN(teacher, Checkpoint::Open(o.teacher));
  }
  return Estimate(o, *ckpt, teacher.get());
}

nlohmann::json HealReport::ToJson() const {
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& e : events) curve.push_back(e.ToJson());
  nlohmann::json j = {{"checkpoint", checkpoint},
                      {"teacher", teacher},
                      {"steps", steps},
                      {"tokens_seen", tokens_seen},
                      {"trainable_parameters", trainable_parameters},
                      {"wall_seconds", wall_seconds},
                      {"eval_tokens", eval_tokens},
                      {"total_seconds", total_seconds},
                      {"settings", settings},
                      {"curve", curve},
                      {"memory_estimate",
                       {{"total_bytes", memory.total_bytes},
                        {"weight_bytes", memory.weight_bytes},
                        {"optimizer_bytes", memory.optimizer_bytes},
                        {"activation_bytes", memory.activation_bytes},
                        {"machine_bytes", memory.machine_bytes}}}};
  if (perplexity_before) j["perplexity_before"] = *perplexity_before;
  if (perplexity_after) j["perplexity_after"] = *perplexity_after;
  if (teacher_perplexity) j["teacher_perplexity"] = *teacher_perplexity;
  if (!resume_note.empty()) j["resume_note"] = resume_note;
  if (kept_step) {
    j["kept_step"] = *kept_step;
    j["kept_validation_loss"] = kept_validation_loss;
    if (unhealed_validation_loss)
      j["unhealed_validation_loss"] = *unhealed_validation_loss;
  }
  return j;
}

absl::StatusOr<HealReport> RunHealJob(
    const HealJobOptions& options,
    const std::function<void(const HealEvent&)>& on_event) {
  try {
    return Run(options, on_event);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("heal: ", e.what_without_backtrace()));
  }
}

}  // namespace lrkv
