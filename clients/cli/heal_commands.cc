// `lrkv heal`: continued training of a converted model (distillation from its
// source and/or next-token loss), with a progress bar on a TTY and JSON-lines
// events.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/commands.h"
#include "nlohmann/json.hpp"
#include "clients/cli/remote.h"
#include "clients/cli/schema_flags.h"
#include "train/heal_job.h"
#include "train/heal_options_schema.h"
#include "train/model_init.h"

namespace lrkv::cli {
namespace {

// heal's options: the schema's flags, the checkpoint and output, and this machine's
// processes and event file.
struct HealArgs {
  std::string checkpoint, out_dir;
  std::shared_ptr<SchemaFlags> flags;
  int nproc = 1;
  std::string events_path;
  HealJobOptions job;  // parsed from the flags by RunHeal
};

// A TCP port that was free a moment ago, for the rendezvous.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// This process's command line (from /proc/self/cmdline) without --nproc N.
std::vector<std::string> OwnArgs() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

// Starts ranks 1..n-1 as child processes of this command; this process is rank
// 0.
std::vector<pid_t> SpawnRanks(int n, int port) {
  std::vector<pid_t> pids;
  const std::vector<std::string> base = OwnArgs();
  for (int rank = 1; rank < n; ++rank) {
    std::vector<std::string> args = base;
    for (const std::string& extra :
         {std::string("--process-rank"), std::to_string(rank),
          std::string("--world-size"), std::to_string(n),
          std::string("--master-port"), std::to_string(port)}) {
      args.push_back(extra);
    }
    const pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  return pids;
}

// One heal event on stderr: an evaluation line, or the progress bar (a
// terminal) or a line every 10 steps.
void PrintHealEvent(const HealEvent& e, const HealJobOptions& job, bool tty) {
  const int64_t total = job.heal.steps;
  if (e.kind == "eval") {
    std::fprintf(stderr, "%sstep %lld  eval loss %.4f  ppl %.3f (%s)%s\n",
                 tty ? "\r\033[K" : "", static_cast<long long>(e.step),
                 e.eval_loss, e.eval_perplexity,
                 job.heal.keep_best ? "validation rows held out from --data"
                                    : "first --eval windows",
                 e.best ? "  best so far" : "");
  } else if (tty) {
    const int width = 30, done = static_cast<int>(width * e.step /
                                                  std::max<int64_t>(1, total));
    std::fprintf(stderr, "\r[%s%s] %lld/%lld loss %.4f lr %.2e %.0fs",
                 std::string(done, '#').c_str(),
                 std::string(width - done, '.').c_str(),
                 static_cast<long long>(e.step), static_cast<long long>(total),
                 e.loss, e.lr, e.wall_seconds);
  } else if (e.step % 10 == 0 || e.step == total) {
    std::fprintf(stderr,
                 "step %lld/%lld loss %.4f (kd %.4f, lm %.4f) lr %.2e grad "
                 "%.3f %.1fs\n",
                 static_cast<long long>(e.step), static_cast<long long>(total),
                 e.loss, e.kd_loss, e.lm_loss, e.lr, e.grad_norm,
                 e.wall_seconds);
  }
}

// The healed model's summary on stdout: steps, tokens, time, the step kept,
// perplexity before and after.
void PrintHealSummary(const HealReport& report, const HealJobOptions& job) {
  if (!report.resume_note.empty())
    std::printf("%s\n", report.resume_note.c_str());
  std::printf(
      "healed %s: %lld steps, %lld tokens, %lld trainable parameters (%s), lr "
      "%.3g, "
      "batch %lld x %lld tokens\n"
      "time: %.1f s in all (evaluations, training %.1f s, writing)\n",
      job.checkpoint.c_str(), static_cast<long long>(report.steps),
      static_cast<long long>(report.tokens_seen),
      static_cast<long long>(report.trainable_parameters),
      TrainableSetName(job.heal.trainable), job.heal.lr,
      static_cast<long long>(job.heal.batch * job.heal.grad_accum),
      static_cast<long long>(job.seq_len), report.total_seconds,
      report.wall_seconds);
  if (report.kept_step) {
    std::printf("kept step %lld of %lld: validation loss %.4f%s\n",
                static_cast<long long>(*report.kept_step),
                static_cast<long long>(report.steps),
                report.kept_validation_loss,
                report.unhealed_validation_loss
                    ? absl::StrFormat(" (unhealed %.4f)",
                                      *report.unhealed_validation_loss)
                          .c_str()
                    : "");
  }
  if (report.perplexity_before && report.perplexity_after) {
    std::printf("perplexity on whole --eval documents: %.4f -> %.4f",
                *report.perplexity_before, *report.perplexity_after);
    if (report.teacher_perplexity)
      std::printf(" (teacher %.4f)", *report.teacher_perplexity);
    if (job.heal.keep_best) {
      std::printf(
          ", %lld tokens (the step evaluations above score %lld rows held out "
          "from --data, a different measure)\n",
          static_cast<long long>(report.eval_tokens),
          static_cast<long long>(report.settings.value("validation_rows", 0)));
    } else {
      std::printf(
          ", %lld tokens (the step evaluations above score the first %lld "
          "--seq-len windows only)\n",
          static_cast<long long>(report.eval_tokens),
          static_cast<long long>(job.heal.eval_rows));
    }
  }
}

int RunHeal(HealArgs a) {
  if (a.out_dir.empty()) return Fail(absl::InvalidArgumentError("--out is required"));
  HealJobOptions base;
  base.checkpoint = a.checkpoint;
  base.out_dir = a.out_dir;
  auto job = ParseFlags(*a.flags, HealOptionSchema(), std::move(base));
  if (!job.ok()) return Fail(job.status());
  a.job = *std::move(job);
  a.job.heal.should_stop = InterruptCheck();
  std::vector<pid_t> children;
  if (a.nproc > 1) {
    if (a.nproc > 64)
      return Fail(absl::InvalidArgumentError("--nproc must lie in [1, 64]"));
    a.job.distributed.world_size = a.nproc;
    a.job.distributed.rank = 0;
    a.job.distributed.master_addr = "127.0.0.1";
    a.job.distributed.master_port = FreePort();
    children = SpawnRanks(a.nproc, a.job.distributed.master_port);
  }
  const bool lead = a.job.distributed.rank == 0;
  std::ofstream events;  // written by rank 0 only
  if (lead && !a.events_path.empty()) {
    events.open(a.events_path);
    if (!events) {
      return Fail(absl::PermissionDeniedError(
          absl::StrCat(a.events_path, ": cannot write")));
    }
  }
  const bool tty = lead && isatty(STDERR_FILENO) &&
                   std::getenv("LRKV_NO_PROGRESS") == nullptr;
  if (lead) {
    if (auto m = EstimateHealMemory(a.job); m.ok()) {
      std::fprintf(stderr, "memory estimate: %s\n", m->ToString().c_str());
    }
  }
  a.job.on_phase = [tty](const std::string& what) {
    std::fprintf(stderr, "%sheal: %s\n", tty ? "\r\033[K" : "", what.c_str());
  };
  auto report = RunHealJob(a.job, [&](const HealEvent& e) {
    if (events.is_open()) events << e.ToJson().dump() << "\n";
    if (!lead) return;
    PrintHealEvent(e, a.job, tty);
  });
  if (tty) std::fprintf(stderr, "\n");
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (report.ok() && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
      return Fail(absl::InternalError("a heal worker process failed"));
    }
  }
  if (!report.ok()) return Fail(report.status());
  if (!lead) return kExitOk;
  if (Globals().json) {
    nlohmann::json j = report->ToJson();
    j["provenance"] = BuildProvenance();
    std::cout << j.dump(2) << "\n";
  } else {
    PrintHealSummary(*report, a.job);
    std::printf("written to %s\n", a.job.out_dir.c_str());
  }
  return kExitOk;
}

}  // namespace

void AddHealCommands(CLI::App& app, int* exit_code) {
  auto init = std::make_shared<ModelInitOptions>();
  auto* icmd = app.add_subcommand("init",
                                  "A randomly initialised Llama checkpoint to "
                                  "train from scratch (with lrkv heal "
                                  "--loss lm --trainable all)");
  icmd->add_option("--tokenizer-from", init->tokenizer_from,
                   "Checkpoint (or, with --config, tokenizer folder) whose tokenizer and "
                   "vocabulary to use")
      ->required();
  icmd->add_option("--layers", init->layers, "Decoder layers");
  icmd->add_option("--hidden", init->hidden, "Model width d");
  icmd->add_option("--heads", init->heads,
                   "Query heads (head dim = hidden / heads)");
  icmd->add_option("--kv-heads", init->kv_heads, "KV heads (0: MHA)");
  icmd->add_option("--ffn", init->ffn, "SwiGLU width");
  icmd->add_option("--context", init->context, "max_position_embeddings");
  icmd->add_option("--seed", init->seed, "Seed of the random weights");
  icmd->add_option("--config", init->config_json,
                   "An HF config.json (a real model's): its shape and settings, written "
                   "as the checkpoint's config.json; --layers etc. are then unused and "
                   "--tokenizer-from may be a tokenizer.json folder");
  icmd->add_option("--weight-dtype", init->weight_dtype,
                   "f32 | f16 | bf16 (default: the --config's torch_dtype, else f32)");
  icmd->add_option("--max-shard-size", init->max_shard_bytes,
                   "Largest safetensors shard (5GB, 500MB, bytes)")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/true))
      ->default_str("5GB");
  icmd->add_option("--out", init->out_dir, "Output folder (must not exist)")
      ->required();
  icmd->callback([init, exit_code] {
    const absl::Status st = WriteInitialCheckpoint(*init);
    if (!st.ok()) {
      *exit_code = Fail(st);
      return;
    }
    if (Globals().json) {
      std::printf("%s\n", nlohmann::json({{"out", init->out_dir}}).dump().c_str());
      *exit_code = kExitOk;
      return;
    }
    if (!init->config_json.empty()) {
      std::printf("initialised a random-weight model of %s in %s\n",
                  init->config_json.c_str(), init->out_dir.c_str());
      *exit_code = kExitOk;
      return;
    }
    std::printf(
        "initialised %lld-layer model (d %lld, %lld heads of %lld) in %s\n",
        static_cast<long long>(init->layers),
        static_cast<long long>(init->hidden),
        static_cast<long long>(init->heads),
        static_cast<long long>(init->hidden /
                               std::max<int64_t>(1, init->heads)),
        init->out_dir.c_str());
    *exit_code = kExitOk;
  });

  auto h = std::make_shared<HealArgs>();
  auto* cmd =
      app.add_subcommand("heal", "Continued training of a converted model");
  cmd->add_option("--checkpoint", h->checkpoint, "Converted checkpoint")->required();
  h->flags = AddSchemaFlags(cmd, HealOptionSchema());
  cmd->add_option("--nproc", h->nproc,
                  "Data-parallel processes on this machine (Gloo)");
  cmd->add_option("--events", h->events_path,
                  "Write one JSON line per step/eval");
  cmd->add_option("--out", h->out_dir,
                  "Output folder (must not exist); with --server the healed checkpoint is "
                  "downloaded there");
  auto remote = RemoteJob::Attach(cmd, {"heal", h->flags});
  cmd->callback([h, remote, exit_code] {
    *exit_code = remote->Requested() ? remote->Run() : RunHeal(*h);
  });
}

}  // namespace lrkv::cli
