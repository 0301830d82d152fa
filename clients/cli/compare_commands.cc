// `lrkv compare`: variants at equal KV-cache budget, converted, healed and
// measured alike (study/compare_job.h); here or, with --server, as an lrkvd
// compare job. Writes the table, the JSON report and the HTML page with its SVG
// plots.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "clients/cli/commands.h"
#include "clients/cli/job_command.h"
#include "clients/cli/remote.h"
#include "clients/cli/schema_flags.h"
#include "clients/cli/yaml_config.h"
#include "nlohmann/json.hpp"
#include "study/compare_html.h"
#include "study/compare_job.h"
#include "study/compare_options_schema.h"

namespace lrkv::cli {
namespace {

// compare's options: the schema's flags, the checkpoint and the report files.
struct CompareArgs {
  std::shared_ptr<SchemaFlags> flags, own;
};

const OptionSchema<JobCommandArgs>& CompareCommandSchema() {
  static const auto schema =
      JobCommandSchema("compare", "Source checkpoint", {"json_out", "html"});
  return schema;
}

int RunCompare(const CompareArgs& c) {
  auto own = ParseFlags(*c.own, CompareCommandSchema(), {});
  if (!own.ok()) return Fail(own.status());
  const JobCommandArgs& args = *own;
  CompareJobOptions base;
  base.checkpoint = args.checkpoint;
  auto job = ParseFlags(*c.flags, CompareOptionSchema(), std::move(base));
  if (!job.ok()) return Fail(job.status());
  CompareJobOptions& o = *job;
  if (o.work_dir.empty()) {
    o.work_dir = (std::filesystem::temp_directory_path() /
                      absl::StrCat("lrkv-compare-", ::getpid()))
                         .string();
  }
  o.should_stop = InterruptCheck();
  auto report = RunCompareJob(o, [](const std::string& stage, int64_t i,
                                        int64_t n, const std::string& message) {
    std::fprintf(stderr, "[%lld/%lld] %s %s\n", static_cast<long long>(i),
                 static_cast<long long>(n), stage.c_str(), message.c_str());
  });
  if (!report.ok()) return Fail(report.status());
  report->run_config["provenance"] = BuildProvenance();
  if (nlohmann::json file = ConfigFileRecord(); !file.is_null()) {
    report->run_config["config_file"] = file["name"];
  }
  if (int rc =
          EmitLocalReport(report->ToJson(), report->ToTable(), args.json_out);
      rc != kExitOk) {
    return rc;
  }
  if (!args.html.empty()) {
    std::ofstream html(args.html);
    html << CompareReportHtml(*report, "lrkv compare (local run)");
    if (!html)
      return Fail(absl::PermissionDeniedError(args.html + ": cannot write"));
  }
  std::fprintf(stderr, "converted and healed checkpoints are in %s\n",
               o.work_dir.c_str());
  return kExitOk;
}

}  // namespace

void AddCompareCommands(CLI::App& app, int* exit_code) {
  auto c = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand("compare",
                                 "GQA, MQA, MLA and LRKV at equal KV-cache "
                                 "budgets, converted and healed alike");
  c->own = AddSchemaFlags(cmd, CompareCommandSchema());
  c->flags = AddSchemaFlags(cmd, CompareOptionSchema());
  auto remote = RemoteJob::Attach(cmd, {"compare", c->flags});
  cmd->callback([c, remote, exit_code] {
    *exit_code = remote->Requested() ? remote->Run() : RunCompare(*c);
  });
}

}  // namespace lrkv::cli
