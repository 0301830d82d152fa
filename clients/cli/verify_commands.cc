// `lrkv verify`: factored vs expanded decoding, cache bytes, fidelity and head
// diversity of a checkpoint, with JSON and JUnit outputs for CI gates. Exit 0
// when every required check passes, 1 when one fails (2 for bad input, commands.h).
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "clients/cli/commands.h"
#include "clients/cli/remote.h"
#include "nlohmann/json.hpp"
#include "verify/verify_job.h"

namespace lrkv::cli {
namespace {

struct VerifyArgs {
  VerifyJobOptions job;
  std::string modes = "all";
  std::string json_path, junit_path;
};

int RunVerify(VerifyArgs a) {
  a.job.modes = absl::StrSplit(a.modes, ',');
  StageProgress progress("verify");
  a.job.on_progress = progress.Sink();
  auto report = RunVerifyJob(a.job);
  progress.Finish();
  if (!report.ok()) return Fail(report.status());
  if (int rc = EmitLocalReport(report->ToJson(), report->ToTable(), a.json_path); rc != kExitOk) {
    return rc;
  }
  if (!a.junit_path.empty()) {
    if (auto st = WriteTextFile(a.junit_path, report->ToJUnit()); !st.ok()) return Fail(st);
  }
  return report->passed() ? kExitOk : kExitFailure;
}

}  // namespace

void AddVerifyCommands(CLI::App& app, int* exit_code) {
  auto v = std::make_shared<VerifyArgs>();
  auto* cmd = app.add_subcommand("verify",
                                 "Prove factored decoding equals expanded "
                                 "decoding; fidelity to the source");
  cmd->add_option("--checkpoint", v->job.checkpoint, "Checkpoint to verify")
      ->required();
  cmd->add_option("--source", v->job.source, "The model it was converted from");
  cmd->add_option(
      "--rope-mode", v->modes,
      "reconstruct | plane | partial | naive | shared-plane | all (comma-separated)");
  cmd->add_option("--prompt-tokens", v->job.prompt_tokens,
                  "Teacher-forced prompt tokens");
  cmd->add_option("--decode-tokens", v->job.decode_tokens,
                  "Greedy steps after the prompt");
  cmd->add_option("--dtype", v->job.dtype, "Cache storage: fp32 | bf16 | both");
  cmd->add_option("--text", v->job.text,
                  "Text for the prompt and for fidelity");
  cmd->add_option("--fidelity-tokens", v->job.fidelity_tokens,
                  "Positions for fidelity");
  cmd->add_option("--json-out", v->json_path, "Write the report as JSON to this file");
  cmd->add_option("--junit", v->junit_path,
                  "Write JUnit XML (one testcase per check)");
  auto remote = RemoteJob::Attach(
      cmd, {"verify", {}, {{"rope-mode", "rope_modes"}}, {"rope-mode"}});
  cmd->callback([v, remote, exit_code] {
    *exit_code = remote->Requested() ? remote->Run() : RunVerify(*v);
  });
}

}  // namespace lrkv::cli
