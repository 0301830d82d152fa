// `lrkv verify`: factored vs expanded decoding, cache bytes, fidelity and head
// diversity of a checkpoint, with JSON and JUnit outputs for CI gates. Exit 0
// when every required check passes, 1 when one fails (2 for bad input,
// commands.h).
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "clients/cli/commands.h"
#include "clients/cli/remote.h"
#include "clients/cli/schema_flags.h"
#include "nlohmann/json.hpp"
#include "verify/verify_job.h"
#include "verify/verify_options_schema.h"

namespace lrkv::cli {
namespace {

// verify's options: the schema's flags, the checkpoint and the report files.
struct VerifyArgs {
  std::string checkpoint;
  std::shared_ptr<SchemaFlags> flags;
  std::string json_path, junit_path;
};

int RunVerify(const VerifyArgs& a) {
  VerifyJobOptions base;
  base.checkpoint = a.checkpoint;
  auto job = ParseFlags(*a.flags, VerifyOptionSchema(), std::move(base));
  if (!job.ok()) return Fail(job.status());
  StageProgress progress("verify");
  job->on_progress = progress.Sink();
  job->on_step = progress.Units();
  job->should_stop = InterruptCheck();
  auto report = RunVerifyJob(*job);
  progress.Finish();
  if (!report.ok()) return Fail(report.status());
  if (int rc =
          EmitLocalReport(report->ToJson(), report->ToTable(), a.json_path);
      rc != kExitOk) {
    return rc;
  }
  if (!a.junit_path.empty()) {
    if (auto st = WriteTextFile(a.junit_path, report->ToJUnit()); !st.ok())
      return Fail(st);
  }
  return report->passed() ? kExitOk : kExitFailure;
}

}  // namespace

void AddVerifyCommands(CLI::App& app, int* exit_code) {
  auto v = std::make_shared<VerifyArgs>();
  auto* cmd = app.add_subcommand("verify",
                                 "Prove factored decoding equals expanded "
                                 "decoding; fidelity to the source");
  cmd->add_option("--checkpoint", v->checkpoint, "Checkpoint to verify")
      ->required();
  v->flags = AddSchemaFlags(cmd, VerifyOptionSchema());
  cmd->add_option("--json-out", v->json_path,
                  "Write the report as JSON to this file");
  cmd->add_option("--junit", v->junit_path,
                  "Write JUnit XML (one testcase per check)");
  auto remote = RemoteJob::Attach(cmd, {"verify", v->flags});
  cmd->callback([v, remote, exit_code] {
    *exit_code = remote->Requested() ? remote->Run() : RunVerify(*v);
  });
}

}  // namespace lrkv::cli
