// `lrkv heal`: continued training of a converted model (distillation from its
// source and/or next-token loss), with a progress bar on a TTY and JSON-lines
// events.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cli/commands.h"
#include "clients/cli/job_command.h"
#include "clients/cli/remote.h"
#include "clients/cli/schema_flags.h"
#include "nlohmann/json.hpp"
#include "train/heal_job.h"
#include "train/heal_options_schema.h"
#include "train/model_init.h"

namespace lrkv::cli {
namespace {

// heal's options: the schema's flags, the checkpoint and output, and this machine's
// processes and event file.
struct HealArgs {
  std::shared_ptr<SchemaFlags> flags, own;
  JobCommandArgs command;  // parsed from `own` by RunHeal
  HealJobOptions job;      // parsed from `flags` by RunHeal
};

const OptionSchema<JobCommandArgs>& HealCommandSchema() {
  static const auto schema = JobCommandSchema("heal", "Converted checkpoint",
                                              {"out", "nproc", "events"});
  return schema;
}

// init's options: ModelInitOptions, all of them.
const OptionSchema<ModelInitOptions>& InitSchema() {
  using A = ModelInitOptions;
  static const OptionSchema<A> schema = [] {
    OptionSchema<A> s("init");
    s.Value(
         "tokenizer_from", [](A & a) -> auto& { return a.tokenizer_from; },
         "Checkpoint (or, with --config, tokenizer folder) whose tokenizer "
         "and vocabulary to use")
        .Path()
        .Required();
    s.Value(
         "layers", [](A & a) -> auto& { return a.layers; }, "Decoder layers")
        .Range(1, 1024);
    s.Value(
         "hidden", [](A & a) -> auto& { return a.hidden; }, "Model width d")
        .Range(1, 1 << 20);
    s.Value(
         "heads", [](A & a) -> auto& { return a.heads; },
         "Query heads (head dim = hidden / heads)")
        .Range(1, 4096);
    s.Value(
         "kv_heads", [](A & a) -> auto& { return a.kv_heads; },
         "KV heads (0: MHA)")
        .Range(0, 4096);
    s.Value(
         "ffn", [](A & a) -> auto& { return a.ffn; }, "SwiGLU width")
        .Range(1, 1 << 22);
    s.Value(
         "context", [](A & a) -> auto& { return a.context; },
         "max_position_embeddings")
        .Range(1, 1 << 24);
    s.Value(
        "seed", [](A & a) -> auto& { return a.seed; },
        "Seed of the random weights");
    s.Value(
         "config", [](A & a) -> auto& { return a.config_json; },
         "An HF config.json (a real model's): its shape and settings, written "
         "as the checkpoint's config.json; --layers etc. are then unused and "
         "--tokenizer-from may be a tokenizer.json folder")
        .Path();
    s.Value(
        "weight_dtype", [](A & a) -> auto& { return a.weight_dtype; },
        "f32 | f16 | bf16 (default: the --config's torch_dtype, else f32)");
    s.Bytes(
        "max_shard_size", [](A & a) -> auto& { return a.max_shard_bytes; },
        "Largest safetensors shard (5GB, 500MB, 2GiB, bytes)", "5GB");
    s.Value(
         "out", [](A & a) -> auto& { return a.out_dir; },
         "Output folder (must not exist)")
        .Path()
        .Required();
    return s;
  }();
  return schema;
}

int RunInit(const ModelInitOptions& init) {
  if (const absl::Status st = WriteInitialCheckpoint(init); !st.ok()) {
    return Fail(st);
  }
  if (Globals().json) {
    std::printf("%s\n", nlohmann::json({{"out", init.out_dir}}).dump().c_str());
    return kExitOk;
  }
  if (!init.config_json.empty()) {
    std::printf("initialised a random-weight model of %s in %s\n",
                init.config_json.c_str(), init.out_dir.c_str());
    return kExitOk;
  }
  std::printf(
      "initialised %lld-layer model (d %lld, %lld heads of %lld) in %s\n",
      static_cast<long long>(init.layers), static_cast<long long>(init.hidden),
      static_cast<long long>(init.heads),
      static_cast<long long>(init.hidden / std::max<int64_t>(1, init.heads)),
      init.out_dir.c_str());
  return kExitOk;
}

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
  auto own = ParseFlags(*a.own, HealCommandSchema(), {});
  if (!own.ok()) return Fail(own.status());
  a.command = *std::move(own);
  if (a.command.out.empty())
    return Fail(absl::InvalidArgumentError("--out is required"));
  HealJobOptions base;
  base.checkpoint = a.command.checkpoint;
  base.out_dir = a.command.out;
  auto job = ParseFlags(*a.flags, HealOptionSchema(), std::move(base));
  if (!job.ok()) return Fail(job.status());
  a.job = *std::move(job);
  a.job.heal.should_stop = InterruptCheck();
  std::vector<pid_t> children;
  if (a.command.nproc > 1) {
    a.job.distributed.world_size = a.command.nproc;
    a.job.distributed.rank = 0;
    a.job.distributed.master_addr = "127.0.0.1";
    a.job.distributed.master_port = FreePort();
    children = SpawnRanks(a.command.nproc, a.job.distributed.master_port);
  }
  const bool lead = a.job.distributed.rank == 0;
  std::ofstream events;  // written by rank 0 only
  if (lead && !a.command.events.empty()) {
    events.open(a.command.events);
    if (!events) {
      return Fail(absl::PermissionDeniedError(
          absl::StrCat(a.command.events, ": cannot write")));
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
  auto* icmd = app.add_subcommand("init",
                                  "A randomly initialised Llama checkpoint to "
                                  "train from scratch (with lrkv heal "
                                  "--loss lm --trainable all)");
  AddSchemaCommand(icmd, InitSchema(), exit_code, RunInit);

  auto h = std::make_shared<HealArgs>();
  auto* cmd =
      app.add_subcommand("heal", "Continued training of a converted model");
  h->own = AddSchemaFlags(cmd, HealCommandSchema());
  h->flags = AddSchemaFlags(cmd, HealOptionSchema());
  auto remote = RemoteJob::Attach(cmd, {"heal", h->flags});
  cmd->callback([h, remote, exit_code] {
    *exit_code = remote->Requested() ? remote->Run() : RunHeal(*h);
  });
}

}  // namespace lrkv::cli
