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
#include "clients/cli/job_command.h"
#include "clients/cli/remote.h"
#include "clients/cli/schema_flags.h"
#include "nlohmann/json.hpp"
#include "verify/verify_job.h"
#include "verify/verify_options_schema.h"

namespace lrkv::cli {
namespace {

// verify's options: the schema's flags, the checkpoint and the report files.
struct VerifyArgs {
  std::shared_ptr<SchemaFlags> flags, own;
};

const OptionSchema<JobCommandArgs>& VerifyCommandSchema() {
  static const auto schema =
      JobCommandSchema("verify", "Checkpoint to verify", {"json_out", "junit"});
  return schema;
}

int RunVerify(const VerifyArgs& v) {
  auto own = ParseFlags(*v.own, VerifyCommandSchema(), {});
  if (!own.ok()) return Fail(own.status());
  const JobCommandArgs& a = *own;
  VerifyJobOptions base;
  base.checkpoint = a.checkpoint;
  auto job = ParseFlags(*v.flags, VerifyOptionSchema(), std::move(base));
  if (!job.ok()) return Fail(job.status());
  StageProgress progress("verify");
  job->on_progress = progress.Sink();
  job->on_step = progress.Units();
  job->should_stop = InterruptCheck();
  auto report = RunVerifyJob(*job);
  progress.Finish();
  if (!report.ok()) return Fail(report.status());
  if (int rc = EmitLocalReport(report->ToJson(), report->ToTable(), a.json_out);
      rc != kExitOk) {
    return rc;
  }
  if (!a.junit.empty()) {
    if (auto st = WriteTextFile(a.junit, report->ToJUnit()); !st.ok())
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
  v->own = AddSchemaFlags(cmd, VerifyCommandSchema());
  v->flags = AddSchemaFlags(cmd, VerifyOptionSchema());
  auto remote = RemoteJob::Attach(cmd, {"verify", v->flags});
  cmd->callback([v, remote, exit_code] {
    *exit_code = remote->Requested() ? remote->Run() : RunVerify(*v);
  });
}

}  // namespace lrkv::cli
