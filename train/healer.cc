// Healing by distillation and next-token loss (see healer.h).
#include "train/healer.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "formats/safetensors.h"
#include "nlohmann/json.hpp"
#include "runtime/transformer.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;

absl::Status Invalid(const std::string& m) {
  return absl::InvalidArgumentError(m);
}

// The tensors `set` trains, in a fixed order (checkpoints rely on it). In
// plane, partial and shared-plane RoPE modes B_hᴷ and the per-head key biases
// stay frozen: the factored decode is exact only while B_hᴷ selects whole
// planes (plane), avoids the rotated planes (partial) or reads each shared
// plane through a complex factor (shared-plane), and gradient steps would break
// that.
std::vector<at::Tensor*> TrainableTensors(const ModelConfig& c, LlamaWeights& w,
                                          TrainableSet set) {
  const bool frozen_k_up = RopeModeTraitsOf(c.kv.rope_mode).fixes_key_up;
  std::vector<at::Tensor*> out;
  auto add = [&](at::Tensor& t) {
    if (t.defined() && t.numel() > 0) out.push_back(&t);
  };
  for (auto& l : w.layers) {
    for (LowRankProjection* p : {&l.k_lr, &l.v_lr}) {
      const bool key = p == &l.k_lr;
      add(p->shared);
      add(p->shared_bias);
      add(p->down);
      if (!(key && frozen_k_up)) {
        add(p->up);
        add(p->head_bias);
      }
    }
    for (at::Tensor* t :
         {&l.wk, &l.wv, &l.bk, &l.bv, &l.kv_down, &l.k_up, &l.v_up, &l.kv_norm,
          &l.k_rope, &l.bk_rope, &l.q_rope, &l.bq_rope})
      add(*t);
    if (set == TrainableSet::kKv) continue;
    for (at::Tensor* t : {&l.wq, &l.bq, &l.wo, &l.q_norm, &l.k_norm}) add(*t);
    if (set == TrainableSet::kAttn) continue;
    for (at::Tensor* t :
         {&l.attn_norm, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
      add(*t);
  }
  if (set == TrainableSet::kAll) {
    add(w.embed);
    add(w.final_norm);
    if (!w.lm_head.is_same(w.embed)) add(w.lm_head);
  }
  return out;
}

// bf16 autocast for CUDA forward passes, across the LibTorch 1.13 and 2.x APIs.
class AutocastScope {
 public:
  explicit AutocastScope(bool on) : on_(on) {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
#endif
  }
  ~AutocastScope() {
    if (!on_) return;
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
    at::autocast::set_enabled(false);
#endif
    at::autocast::clear_cache();
  }

 private:
  bool on_;
};

struct Batch {
  at::Tensor inputs, targets, positions, segments, predict;  // [B, T] each
};

Batch MakeBatch(const TokenDataset& data, const std::vector<int64_t>& rows,
                at::Device device) {
  const int64_t b = static_cast<int64_t>(rows.size()), t = data.seq_len();
  auto tokens = at::empty({b, t + 1}, at::kLong),
       pos = at::empty({b, t + 1}, at::kLong),
       seg = at::empty({b, t + 1}, at::kLong);
  auto ta = tokens.accessor<int64_t, 2>(), pa = pos.accessor<int64_t, 2>(),
       sa = seg.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b; ++i) {
    const PackedRow& r = data.row(rows[i]);
    for (int64_t j = 0; j <= t; ++j) {
      ta[i][j] = r.tokens[j];
      pa[i][j] = r.positions[j];
      sa[i][j] = r.segments[j];
    }
  }
  tokens = tokens.to(device);
  pos = pos.to(device);
  seg = seg.to(device);
  Batch batch;
  batch.inputs = tokens.narrow(1, 0, t);
  batch.targets = tokens.narrow(1, 1, t);
  batch.positions = pos.narrow(1, 0, t);
  batch.segments = seg.narrow(1, 0, t);
  // A target is predicted when it continues the same (non-padding) segment.
  batch.predict =
      (seg.narrow(1, 1, t) == batch.segments) & (batch.segments >= 0);
  return batch;
}

}  // namespace

struct Healer::State {
  ModelConfig config;
  LlamaWeights weights;
  std::unique_ptr<Transformer> student;  // shares tensors with `weights`
  std::unique_ptr<Transformer> teacher;
  TokenDataset train;
  std::optional<TokenDataset> eval;
  HealOptions options;
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  int64_t step = 0;
  int64_t position = 0;  // rows consumed
  // keep_best: the lowest evaluation loss so far, its step and its parameters
  // (copies, only of the trained set), and the unhealed model's loss.
  int64_t best_step = -1;
  double best_loss = std::numeric_limits<double>::quiet_NaN();
  double unhealed_loss = std::numeric_limits<double>::quiet_NaN();
  std::vector<at::Tensor> best_params;
  bool kept =
      false;  // Run restored (or confirmed) best_params at the last step
  int64_t tokens_seen = 0;
  DistributedOptions distributed;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;  // null in a single process
  at::Device device = at::kCPU;

  // Sums `tensors` (in place) over every process, as one flat buffer of their
  // common dtype (Gloo reduces a list of same-shaped tensors, one per device);
  // no-op in a single process.
  void AllReduce(std::vector<at::Tensor>& tensors) const {
    if (!group) return;
    std::vector<at::Tensor> flat;
    for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
    std::vector<at::Tensor> buffer = {at::cat(flat)};
    group->allreduce(buffer)->wait();
    int64_t offset = 0;
    for (auto& t : tensors) {
      t.copy_(buffer[0].narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }

  // Row `i` of the visiting order: each epoch is a seeded permutation, built
  // once per epoch (not per row).
  int64_t cached_epoch = -1;
  std::vector<int64_t> epoch_order;
  int64_t RowAt(int64_t i) {
    const int64_t n = train.rows(), epoch = i / n;
    if (epoch != cached_epoch) {
      epoch_order.resize(n);
      for (int64_t k = 0; k < n; ++k) epoch_order[k] = k;
      std::mt19937_64 rng(options.seed * 1000003 +
                          static_cast<uint64_t>(epoch));
      std::shuffle(epoch_order.begin(), epoch_order.end(), rng);
      cached_epoch = epoch;
    }
    return epoch_order[i % n];
  }

  // The loss sums of one optimizer step (this process's, then reduced).
  struct StepLosses {
    double loss = 0, kd = 0, lm = 0;
  };
  // One micro-batch: forward, loss (KD, LM or both), backward; adds to `sums`.
  void MicroBatch(StepLosses* sums);
  // The gradients' norm over the trained set (clipped to options.clip when
  // positive).
  double GradNorm();
  // One optimizer step at learning rate `lr`, as its event.
  HealEvent TrainStep(double lr);

  double LearningRate(int64_t s) const {
    const HealOptions& o = options;
    const int64_t warmup = o.WarmupSteps();
    if (warmup > 0 && s < warmup)
      return o.lr * static_cast<double>(s + 1) / warmup;
    const double span = std::max<int64_t>(1, o.steps - warmup);
    const double progress =
        std::min(1.0, static_cast<double>(s - warmup) / span);
    const double cosine = 0.5 * (1 + std::cos(M_PI * progress));
    return o.lr * (o.min_lr_ratio + (1 - o.min_lr_ratio) * cosine);
  }
};

Healer::Healer(std::unique_ptr<State> state) : s_(std::move(state)) {}
Healer::~Healer() = default;

int64_t Healer::step() const { return s_->step; }
const LlamaWeights& Healer::weights() const { return s_->weights; }
const ModelConfig& Healer::config() const { return s_->config; }
int64_t Healer::trainable_parameters() const {
  int64_t n = 0;
  for (const auto& p : s_->params) n += p.numel();
  return n;
}

absl::StatusOr<std::unique_ptr<Healer>> Healer::Create(
    const ModelConfig& student_config, LlamaWeights student,
    std::optional<std::pair<ModelConfig, LlamaWeights>> teacher,
    TokenDataset train, std::optional<TokenDataset> eval, HealOptions options,
    DistributedOptions distributed) {
  RETURN_IF_ERROR(options.Validate());
  RETURN_IF_ERROR(distributed.Validate(options.batch));
  if (options.loss != HealLoss::kLm && !teacher) {
    return Invalid("the kd losses need a teacher (--teacher)");
  }
  if (teacher) {
    const ModelConfig& t = teacher->first;
    if (t.vocab_size != student_config.vocab_size) {
      return Invalid(absl::StrCat("teacher vocabulary (", t.vocab_size,
                                  ") differs from the student's (",
                                  student_config.vocab_size, ")"));
    }
    if (t.num_layers != student_config.num_layers ||
        t.hidden_size != student_config.hidden_size) {
      return Invalid(absl::StrCat(
          "teacher has ", t.num_layers, " layers of width ", t.hidden_size,
          "; the student ", student_config.num_layers, " of width ",
          student_config.hidden_size,
          ": distill from the model it was converted from"));
    }
  }
  if (train.seq_len() > student_config.max_position_embeddings) {
    return Invalid(absl::StrCat("--seq-len ", train.seq_len(),
                                " exceeds the model's context of ",
                                student_config.max_position_embeddings));
  }
  auto s = std::make_unique<State>();
  s->config = student_config;
  s->weights = std::move(student);
  s->train = std::move(train);
  s->eval = std::move(eval);
  s->options = options;
  s->distributed = distributed;
  const bool cuda = torch::cuda::is_available();
  if (options.device == "cuda" && !cuda) {
    return Invalid("--device cuda: this LibTorch has no CUDA device");
  }
  if (cuda && options.device != "cpu") {
    s->device = at::Device(at::kCUDA,
                           distributed.world_size > 1 ? distributed.rank : 0);
  }
  try {
    if (!s->device.is_cpu()) {
      s->weights = ToDevice(s->weights, s->device);
      if (teacher) teacher->second = ToDevice(teacher->second, s->device);
    }
    if (distributed.world_size > 1) {
      c10d::TCPStoreOptions store_options;
      store_options.port = static_cast<uint16_t>(distributed.master_port);
      store_options.isServer = distributed.rank == 0;
      store_options.numWorkers = distributed.world_size;
      store_options.timeout = std::chrono::seconds(120);
      auto store = c10::make_intrusive<c10d::TCPStore>(distributed.master_addr,
                                                       store_options);
      auto gloo = c10d::ProcessGroupGloo::Options::create();
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(
          distributed.master_addr));
      s->group = c10::make_intrusive<c10d::ProcessGroupGloo>(
          store, distributed.rank, distributed.world_size, gloo);
    }
    for (at::Tensor* t :
         TrainableTensors(s->config, s->weights, options.trainable)) {
      // A writable float32 copy of each trained tensor; the frozen rest may
      // stay in its stored dtype (read-only views of the checkpoint's map),
      // which autograd multiplies through FrozenStoredLinear without fp32
      // copies.
      *t = t->detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
      t->requires_grad_(true);
      s->params.push_back(*t);
    }
    if (s->config.tie_word_embeddings) s->weights.lm_head = s->weights.embed;
    if (s->params.empty())
      return Invalid("no trainable parameters in this set");
    ASSIGN_OR_RETURN(s->student, Transformer::Create(s->config, s->weights));
    if (options.activation_checkpointing) {
      // The recomputation would run outside the forward's bf16 autocast on
      // CUDA.
      if (!s->device.is_cpu()) {
        return Invalid(
            "--activation-checkpointing runs on the CPU only for now (--device "
            "cpu)");
      }
      s->student->set_activation_checkpointing(true);
    }
    if (teacher) {
      ASSIGN_OR_RETURN(
          s->teacher,
          Transformer::Create(teacher->first, std::move(teacher->second)));
    }
    s->optimizer = std::make_unique<torch::optim::AdamW>(
        s->params, torch::optim::AdamWOptions(options.lr)
                       .weight_decay(options.weight_decay));
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  }
  return std::unique_ptr<Healer>(new Healer(std::move(s)));
}

absl::StatusOr<double> Healer::EvalLoss(const TokenDataset& data) const {
  at::NoGradGuard no_grad;
  double total = 0;
  int64_t count = 0;
  const int64_t rows = std::min(data.rows(), s_->options.eval_rows);
  for (int64_t start = 0; start < rows; start += s_->options.batch) {
    std::vector<int64_t> ids;
    for (int64_t i = start; i < std::min(rows, start + s_->options.batch); ++i)
      ids.push_back(i);
    const Batch b = MakeBatch(data, ids, s_->device);
    AutocastScope autocast(s_->device.is_cuda());
    auto logits = s_->student->ForwardPacked(b.inputs, b.positions, b.segments)
                      .to(at::kFloat);
    auto nll = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                      b.targets.reshape({-1}), {},
                                      at::Reduction::None);
    const auto mask = b.predict.reshape({-1}).to(at::kFloat);
    total += (nll * mask).sum().item<double>();
    count += mask.sum().item<int64_t>();
  }
  if (count == 0) return Invalid("evaluation data holds no tokens to predict");
  return total / static_cast<double>(count);
}

void Healer::State::MicroBatch(StepLosses* sums) {
  const HealOptions& o = options;
  const int64_t share = o.batch / distributed.world_size;
  // Every process walks the same global order and takes its share of the rows.
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < o.batch; ++i) {
    const int64_t row = RowAt(position++);
    if (i / share == distributed.rank) ids.push_back(row);
  }
  const Batch b = MakeBatch(train, ids, device);
  AutocastScope autocast(device.is_cuda());
  const auto mask = b.predict.to(at::kFloat);
  // Normalise by the global batch's predicted tokens, so that summed gradients
  // equal the one-process gradient.
  std::vector<at::Tensor> count = {mask.sum().reshape({1})};
  AllReduce(count);
  const double predicted = std::max(1.0, count[0].item<double>());
  auto logits =
      student->ForwardPacked(b.inputs, b.positions, b.segments).to(at::kFloat);
  at::Tensor loss = at::zeros({}, logits.options());
  if (o.loss != HealLoss::kKd) {
    auto nll =
        at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                               b.targets.reshape({-1}), {}, at::Reduction::None)
            .view(mask.sizes());
    auto lm = (nll * mask).sum() / predicted;
    sums->lm += lm.item<double>();  // this process's share; summed in TrainStep
    loss = loss + (o.loss == HealLoss::kKdLm ? o.lm_weight : 1.0) * lm;
  }
  if (o.loss != HealLoss::kLm) {
    at::Tensor teacher_logp;
    {
      at::NoGradGuard no_grad;
      teacher_logp = at::log_softmax(
          teacher->ForwardPacked(b.inputs, b.positions, b.segments)
                  .to(at::kFloat) /
              o.temperature,
          -1);
    }
    auto student_logp = at::log_softmax(logits / o.temperature, -1);
    auto kl = (teacher_logp.exp() * (teacher_logp - student_logp)).sum(-1);
    auto kd = (kl * mask).sum() / predicted * (o.temperature * o.temperature);
    sums->kd += kd.item<double>();
    loss = loss + (o.loss == HealLoss::kKdLm ? o.kd_weight : 1.0) * kd;
  }
  sums->loss += loss.item<double>();
  (loss / static_cast<double>(o.grad_accum)).backward();
  tokens_seen += static_cast<int64_t>(predicted);  // global count
}

double Healer::State::GradNorm() {
  if (options.clip > 0)
    return torch::nn::utils::clip_grad_norm_(params, options.clip);
  double grad_norm = 0;
  for (const auto& p : params) {
    if (p.grad().defined()) grad_norm += p.grad().pow(2).sum().item<double>();
  }
  return std::sqrt(grad_norm);
}

HealEvent Healer::State::TrainStep(double lr) {
  const HealOptions& o = options;
  for (auto& g : optimizer->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  }
  optimizer->zero_grad();
  StepLosses sums;
  for (int64_t micro = 0; micro < o.grad_accum; ++micro) MicroBatch(&sums);
  if (group) {
    std::vector<at::Tensor> grads;
    for (auto& p : params) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.grad());
    }
    AllReduce(grads);
    std::vector<at::Tensor> reduced = {
        at::tensor({sums.loss, sums.kd, sums.lm}, at::kDouble).to(device)};
    AllReduce(reduced);
    sums.loss = reduced[0][0].item<double>();
    sums.kd = reduced[0][1].item<double>();
    sums.lm = reduced[0][2].item<double>();
  }
  const double grad_norm = GradNorm();
  optimizer->step();
  ++step;
  HealEvent ev;
  ev.kind = "step";
  ev.step = step;
  ev.tokens_seen = tokens_seen;
  ev.loss = sums.loss / o.grad_accum;
  ev.kd_loss = sums.kd / o.grad_accum;
  ev.lm_loss = sums.lm / o.grad_accum;
  ev.lr = lr;
  ev.grad_norm = grad_norm;
  return ev;
}

absl::Status Healer::Run(const std::function<void(const HealEvent&)>& on_event,
                         int64_t stop_at) {
  State& s = *s_;
  const HealOptions& o = s.options;
  const int64_t last = stop_at >= 0 ? std::min(stop_at, o.steps) : o.steps;
  const auto t0 = std::chrono::steady_clock::now();
  auto wall = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
        .count();
  };
  // keep_best: records an evaluation at the current step, the new best if it is
  // lower.
  auto consider = [&](double eval_loss) {
    const bool better = s.best_step < 0 || eval_loss < s.best_loss;
    if (!o.keep_best || !better) return false;
    s.best_step = s.step;
    s.best_loss = eval_loss;
    s.best_params.clear();
    for (const auto& p : s.params) s.best_params.push_back(p.detach().clone());
    return true;
  };
  auto evaluate = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(double eval_loss, EvalLoss(*s.eval));
    HealEvent e;
    e.kind = "eval";
    e.step = s.step;
    e.tokens_seen = s.tokens_seen;
    e.eval_loss = eval_loss;
    e.eval_perplexity = std::exp(eval_loss);
    e.best = consider(eval_loss);
    if (s.step == 0) s.unhealed_loss = eval_loss;
    e.wall_seconds = wall();
    if (on_event) on_event(e);
    return absl::OkStatus();
  };
  try {
    // The unhealed model is the first candidate of keep_best.
    if (o.keep_best && s.eval && s.step == 0 && s.best_step < 0 &&
        s.step < last) {
      RETURN_IF_ERROR(evaluate());
    }
    while (s.step < last) {
      if (o.should_stop && o.should_stop()) {
        return absl::CancelledError(absl::StrCat("training stopped at step ",
                                                 s.step, " of ", o.steps,
                                                 " on request"));
      }
      HealEvent ev = s.TrainStep(s.LearningRate(s.step));
      ev.wall_seconds = wall();
      if (on_event) on_event(ev);
      if (s.eval && ((o.eval_every > 0 && s.step % o.eval_every == 0) ||
                     s.step == o.steps)) {
        RETURN_IF_ERROR(evaluate());
      }
      if (o.checkpoint_every > 0 && s.step % o.checkpoint_every == 0 &&
          s.distributed.rank == 0) {
        RETURN_IF_ERROR(SaveCheckpoint(o.checkpoint_dir));
      }
    }
    if (o.keep_best && s.step == o.steps && s.best_step >= 0 && !s.kept) {
      // The run is over: end with the best parameters (those of an earlier
      // step, or of the unhealed model, when later steps only raised the
      // evaluation loss).
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < s.params.size(); ++i)
        s.params[i].copy_(s.best_params[i]);
      s.kept = true;
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("healing failed: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

int64_t Healer::kept_step() const { return s_->kept ? s_->best_step : -1; }
double Healer::kept_eval_loss() const {
  return s_->kept ? s_->best_loss : std::numeric_limits<double>::quiet_NaN();
}
double Healer::unhealed_eval_loss() const { return s_->unhealed_loss; }

absl::Status Healer::SaveCheckpoint(const std::string& dir) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return absl::PermissionDeniedError(absl::StrCat(dir, ": ", ec.message()));
  try {
    // Written under temporary names, then renamed, so a crash leaves the last
    // one whole.
    torch::serialize::OutputArchive params;
    for (size_t i = 0; i < s_->params.size(); ++i) {
      params.write(absl::StrCat("p", i), s_->params[i].detach());
    }
    params.save_to((fs::path(dir) / "params.pt.tmp").string());
    // keep_best's candidate travels with the checkpoint, so a resumed run still
    // ends with the best parameters of the whole run.
    torch::serialize::OutputArchive best;
    for (size_t i = 0; i < s_->best_params.size(); ++i) {
      best.write(absl::StrCat("p", i), s_->best_params[i]);
    }
    best.save_to((fs::path(dir) / "best.pt.tmp").string());
    torch::save(*s_->optimizer, (fs::path(dir) / "optimizer.pt.tmp").string());
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(dir, ": ", e.what_without_backtrace()));
  }
  nlohmann::json state = {
      {"step", s_->step},
      {"position", s_->position},
      {"tokens_seen", s_->tokens_seen},
      {"seed", s_->options.seed},
      {"steps", s_->options.steps},
      {"world_size", s_->distributed.world_size},
      {"parameters", s_->params.size()},
      {"best_step", s_->best_step},
      {"best_loss", s_->best_step >= 0 ? s_->best_loss : 0.0},
      {"unhealed_loss", std::isnan(s_->unhealed_loss)
                            ? nlohmann::json()
                            : nlohmann::json(s_->unhealed_loss)}};
  RETURN_IF_ERROR(WriteFileAtomically(
      (fs::path(dir) / "state.json").string() + ".tmp", state.dump(2) + "\n"));
  for (const char* f : {"params.pt", "best.pt", "optimizer.pt", "state.json"}) {
    fs::rename(fs::path(dir) / (std::string(f) + ".tmp"), fs::path(dir) / f,
               ec);
    if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Healer::LoadCheckpoint(const std::string& dir) {
  std::string note;
  const fs::path state_path = fs::path(dir) / "state.json";
  std::ifstream in(state_path);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat(state_path.string(), ": no checkpoint"));
  nlohmann::json state;
  try {
    in >> state;
    if (state.at("parameters").get<size_t>() != s_->params.size() ||
        state.at("seed").get<uint64_t>() != s_->options.seed) {
      return Invalid(
          absl::StrCat(dir,
                       ": checkpoint was written for another trainable set "
                       "or seed"));
    }
    torch::serialize::InputArchive params;
    params.load_from((fs::path(dir) / "params.pt").string());
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < s_->params.size(); ++i) {
      at::Tensor t;
      params.read(absl::StrCat("p", i), t);
      if (!t.sizes().equals(s_->params[i].sizes())) {
        return Invalid(
            absl::StrCat(dir, ": parameter ", i, " has the wrong shape"));
      }
      s_->params[i].copy_(t);
    }
    torch::load(*s_->optimizer, (fs::path(dir) / "optimizer.pt").string());
    s_->best_step = state.value("best_step", int64_t{-1});
    s_->best_params.clear();
    if (s_->best_step >= 0) {
      s_->best_loss = state.at("best_loss").get<double>();
      torch::serialize::InputArchive best;
      best.load_from((fs::path(dir) / "best.pt").string());
      for (size_t i = 0; i < s_->params.size(); ++i) {
        at::Tensor t;
        best.read(absl::StrCat("p", i), t);
        if (!t.sizes().equals(s_->params[i].sizes())) {
          return Invalid(absl::StrCat(dir, ": best parameter ", i,
                                      " has the wrong shape"));
        }
        s_->best_params.push_back(t.to(s_->params[i].options()));
      }
    }
    if (state.contains("unhealed_loss") && state["unhealed_loss"].is_number()) {
      s_->unhealed_loss = state["unhealed_loss"].get<double>();
    }
    s_->step = state.at("step").get<int64_t>();
    s_->position = state.at("position").get<int64_t>();
    s_->tokens_seen = state.at("tokens_seen").get<int64_t>();
    if (s_->step >= s_->options.steps) {
      return Invalid(absl::StrCat(dir, ": the checkpoint is at step ", s_->step,
                                  ", already at or past --steps ",
                                  s_->options.steps));
    }
    const int64_t planned = state.value("steps", s_->options.steps);
    if (planned != s_->options.steps) {
      note = absl::StrCat(
          "resumed at step ", s_->step, " of a run planned for ", planned,
          " steps; with --steps ", s_->options.steps,
          " the learning-rate schedule (warmup, cosine decay) is that of a ",
          s_->options.steps, "-step run from here on");
    }
  } catch (const nlohmann::json::exception& e) {
    return Invalid(absl::StrCat(state_path.string(), ": ", e.what()));
  } catch (const c10::Error& e) {
    return Invalid(absl::StrCat(dir, ": ", e.what_without_backtrace()));
  }
  return note;
}

}  // namespace lrkv
