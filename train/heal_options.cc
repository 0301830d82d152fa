// Options and progress events of healing (see heal_options.h).
#include "train/heal_options.h"

#include "absl/strings/str_cat.h"

namespace lrkv {
namespace {

absl::Status Invalid(const std::string& m) { return absl::InvalidArgumentError(m); }

}  // namespace

absl::StatusOr<TrainableSet> ParseTrainableSet(const std::string& name) {
  if (name == "kv") return TrainableSet::kKv;
  if (name == "attn") return TrainableSet::kAttn;
  if (name == "all") return TrainableSet::kAll;
  return Invalid(absl::StrCat("--trainable '", name, "' must be kv, attn or all"));
}

const char* TrainableSetName(TrainableSet t) {
  return t == TrainableSet::kKv ? "kv" : t == TrainableSet::kAttn ? "attn" : "all";
}

const char* HealLossName(HealLoss l) {
  return l == HealLoss::kKd ? "kd" : l == HealLoss::kLm ? "lm" : "kd+lm";
}

absl::StatusOr<HealLoss> ParseHealLoss(const std::string& name) {
  if (name == "kd") return HealLoss::kKd;
  if (name == "lm") return HealLoss::kLm;
  if (name == "kd+lm") return HealLoss::kKdLm;
  return Invalid(absl::StrCat("--loss '", name, "' must be kd, lm or kd+lm"));
}

absl::Status HealOptions::Validate() const {
  if (steps < 1 || steps > 10'000'000) return Invalid(absl::StrCat("--steps ", steps, " must lie in [1, 10000000]"));
  if (batch < 1 || batch > 65536) return Invalid(absl::StrCat("--batch ", batch, " must lie in [1, 65536]"));
  if (grad_accum < 1 || grad_accum > 4096) return Invalid(absl::StrCat("--accum ", grad_accum, " must lie in [1, 4096]"));
  if (!(lr > 0) || lr > 1) return Invalid(absl::StrCat("--lr ", lr, " must lie in (0, 1]"));
  if (warmup != kAutoWarmup && (warmup < 0 || warmup > steps)) {
    return Invalid(absl::StrCat("--warmup ", warmup, " must lie in [0, --steps ", steps,
                                "] (or -1: a tenth of the steps)"));
  }
  if (min_lr_ratio < 0 || min_lr_ratio > 1) return Invalid("min lr ratio must lie in [0, 1]");
  if (weight_decay < 0 || weight_decay > 1) return Invalid("weight decay must lie in [0, 1]");
  if (clip < 0) return Invalid("--clip must be >= 0");
  if (!(temperature > 0) || temperature > 100) return Invalid("--temperature must lie in (0, 100]");
  if (kd_weight < 0 || lm_weight < 0) return Invalid("loss weights must be >= 0");
  if (eval_every < 0 || eval_rows < 1) return Invalid("--eval-every must be >= 0 and eval rows >= 1");
  if (checkpoint_every < 0) return Invalid("--checkpoint-every must be >= 0");
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return Invalid(absl::StrCat("--device '", device, "' must be auto, cpu or cuda"));
  }
  if (checkpoint_every > 0 && checkpoint_dir.empty()) {
    return Invalid("--checkpoint-every needs a checkpoint folder");
  }
  return absl::OkStatus();
}

absl::Status DistributedOptions::Validate(int64_t batch) const {
  if (world_size < 1 || world_size > 1024 || rank < 0 || rank >= world_size) {
    return Invalid(absl::StrCat("--rank ", rank, " must lie in [0, --world-size ", world_size,
                                ") and the world size in [1, 1024]"));
  }
  if (batch % world_size != 0) {
    return Invalid(absl::StrCat("--batch ", batch, " must be a multiple of the world size ",
                                world_size, " (each process takes an equal share)"));
  }
  if (master_port < 1 || master_port > 65535) {
    return Invalid(absl::StrCat("--master-port ", master_port, " must lie in [1, 65535]"));
  }
  return absl::OkStatus();
}

nlohmann::json HealEvent::ToJson() const {
  nlohmann::json j = {{"kind", kind}, {"step", step}, {"tokens_seen", tokens_seen},
                      {"wall_seconds", wall_seconds}};
  if (kind == "step") {
    j["loss"] = loss;
    j["kd_loss"] = kd_loss;
    j["lm_loss"] = lm_loss;
    j["lr"] = lr;
    j["grad_norm"] = grad_norm;
  } else {
    j["eval_loss"] = eval_loss;
    j["eval_perplexity"] = eval_perplexity;
    if (best) j["best"] = true;
  }
  return j;
}

}  // namespace lrkv
