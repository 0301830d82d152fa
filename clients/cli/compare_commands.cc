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
#include "clients/cli/remote.h"
#include "clients/cli/yaml_config.h"
#include "nlohmann/json.hpp"
#include "study/compare_html.h"
#include "study/compare_job.h"

namespace lrkv::cli {
namespace {

struct CompareArgs {
  CompareJobOptions job;
  std::string budgets = "0.25,0.5,0.75", variants = "gqa,mqa,mla,lrkv";
  std::string rope_modes = "plane,reconstruct", contexts = "128,512,2048";
  std::string calib_range = "0:1", data_range = "0:1", eval_range = "0:1";
  std::string allocation = "uniform";
  std::string json_path, html_path;
};

template <typename T>
absl::StatusOr<std::vector<T>> ParseList(const std::string& text,
                                         const char* flag) {
  std::vector<T> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    T v;
    bool ok;
    if constexpr (std::is_same_v<T, double>) {
      ok = absl::SimpleAtod(part, &v);
    } else {
      ok = absl::SimpleAtoi(part, &v);
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " '", text, "' must be a comma-separated list of numbers"));
    }
    out.push_back(v);
  }
  return out;
}

int RunCompare(CompareArgs a) {
  auto budgets = ParseList<double>(a.budgets, "--budget");
  if (!budgets.ok()) return Fail(budgets.status());
  auto contexts = ParseList<int64_t>(a.contexts, "--context");
  if (!contexts.ok()) return Fail(contexts.status());
  a.job.budgets = *budgets;
  a.job.contexts = *contexts;
  a.job.variants = absl::StrSplit(a.variants, ',', absl::SkipEmpty());
  a.job.rope_modes = absl::StrSplit(a.rope_modes, ',', absl::SkipEmpty());
  auto allocation = ParseSizeAllocation(a.allocation);
  if (!allocation.ok()) return Fail(allocation.status());
  a.job.allocation = *allocation;
  for (auto [text, range] : {std::pair{&a.calib_range, &a.job.calib_range},
                             std::pair{&a.data_range, &a.job.data_range},
                             std::pair{&a.eval_range, &a.job.eval_range}}) {
    auto r = ParseDocumentRange(*text);
    if (!r.ok()) return Fail(r.status());
    *range = *r;
  }
  if (a.job.work_dir.empty()) {
    a.job.work_dir = (std::filesystem::temp_directory_path() /
                      absl::StrCat("lrkv-compare-", ::getpid()))
                         .string();
  }
  auto report = RunCompareJob(a.job, [](const std::string& stage, int64_t i,
                                        int64_t n, const std::string& message) {
    std::fprintf(stderr, "[%lld/%lld] %s %s\n", static_cast<long long>(i),
                 static_cast<long long>(n), stage.c_str(), message.c_str());
  });
  if (!report.ok()) return Fail(report.status());
  report->run_config["provenance"] = BuildProvenance();
  if (nlohmann::json file = ConfigFileRecord(); !file.is_null()) {
    report->run_config["config_file"] = file["name"];
  }
  if (int rc = EmitLocalReport(report->ToJson(), report->ToTable(), a.json_path); rc != kExitOk) {
    return rc;
  }
  if (!a.html_path.empty()) {
    std::ofstream html(a.html_path);
    html << CompareReportHtml(*report, "lrkv compare (local run)");
    if (!html)
      return Fail(absl::PermissionDeniedError(a.html_path + ": cannot write"));
  }
  std::fprintf(stderr, "converted and healed checkpoints are in %s\n",
               a.job.work_dir.c_str());
  return kExitOk;
}

}  // namespace

void AddCompareCommands(CLI::App& app, int* exit_code) {
  auto c = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand("compare",
                                 "GQA, MQA, MLA and LRKV at equal KV-cache "
                                 "budgets, converted and healed alike");
  CompareJobOptions& o = c->job;
  cmd->add_option("--checkpoint", o.checkpoint, "Source checkpoint")
      ->required();
  cmd->add_option("--label", o.label, "Name of the model in the report");
  cmd->add_option("--budget", c->budgets,
                  "Cache budgets (fractions of the source cache)");
  cmd->add_option("--variants", c->variants,
                  "Comma list of gqa, mqa, mla, lrkv");
  cmd->add_option("--rope-mode", c->rope_modes,
                  "RoPE handling: plane, reconstruct, partial, shared-plane (LRKV each; MLA "
                  "reconstruct, and with partial also decoupled RoPE)");
  cmd->add_option("--allocation", c->allocation,
                  "LRKV/MLA sizes: uniform | layers (per-layer within each budget, by the "
                  "measured loss on --calib text; shared-plane keeps one rank)")
      ->capture_default_str();
  cmd->add_option("--calib", o.calib, "Calibration text (activation metric)");
  cmd->add_option("--calib-range", c->calib_range,
                  "Documents of --calib to use, A:B");
  cmd->add_option("--heal-steps", o.heal_steps,
                  "Healing steps per variant (0: none)");
  cmd->add_option("--data", o.data, "Healing text");
  cmd->add_option("--data-range", c->data_range,
                  "Documents of --data to use, A:B");
  cmd->add_option("--heal-batch", o.heal_batch, "Rows per healing step");
  cmd->add_option("--heal-seq-len", o.heal_seq_len, "Tokens per healing row");
  cmd->add_option("--heal-lr", o.heal_lr, "Peak healing learning rate");
  cmd->add_option("--heal-warmup", o.heal_warmup, "Healing warmup steps");
  cmd->add_option("--eval", o.eval, "Held-out text (perplexity and KL)")
      ->required();
  cmd->add_option("--eval-range", c->eval_range,
                  "Documents of --eval to use, A:B");
  cmd->add_option("--kl-tokens", o.kl_tokens,
                  "Positions for the KL measurement");
  cmd->add_option("--context", c->contexts,
                  "Context lengths for decode timing");
  cmd->add_option("--timed-tokens", o.timed_tokens,
                  "Timed decode steps per context");
  cmd->add_option("--work-dir", o.work_dir,
                  "Where converted and healed models go");
  cmd->add_option("--json-out", c->json_path, "Write the report as JSON to this file");
  cmd->add_option("--html", c->html_path,
                  "Write the report as HTML with SVG plots");
  RemoteSpec spec;
  spec.kind = "compare";
  spec.skip = {"work-dir"};
  spec.rename = {{"budget", "budget"}, {"rope-mode", "rope_mode"}};
  spec.lists = {"budget", "variants", "rope-mode", "context"};
  auto remote = RemoteJob::Attach(cmd, spec);
  cmd->callback([c, remote, exit_code] {
    *exit_code = remote->Requested() ? remote->Run() : RunCompare(*c);
  });
}

}  // namespace lrkv::cli
