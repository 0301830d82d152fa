// What a command that is also an lrkvd job (convert, verify, heal, compare)
// takes beyond its job's options (whose schema is the job's): the checkpoint
// it reads and where it writes, declared here once for all of them.
#ifndef LRKV_CLIENTS_CLI_JOB_COMMAND_H_
#define LRKV_CLIENTS_CLI_JOB_COMMAND_H_

#include <set>
#include <string>

#include "base/option_schema.h"
#include "clients/cli/shared_options.h"

namespace lrkv::cli {

struct JobCommandArgs {
  std::string checkpoint, out, json_out, junit, html;
  // heal's: processes on this machine and the event file.
  int nproc = 1;
  std::string events;
};

// The command's own options: --checkpoint (required) and the outputs it
// names: "out", "json_out", "junit", "html", "nproc", "events".
inline OptionSchema<JobCommandArgs> JobCommandSchema(
    const std::string& command, const std::string& checkpoint_help,
    const std::set<std::string>& outputs) {
  using A = JobCommandArgs;
  OptionSchema<A> s(command);
  AddCheckpointOption(
      s, [](A & a) -> auto& { return a.checkpoint; }, checkpoint_help);
  if (outputs.count("out")) {
    s.Value(
         "out", [](A & a) -> auto& { return a.out; },
         "Output folder (must not exist; parents are made); with --server the "
         "job's checkpoint is downloaded there")
        .Path();
  }
  if (outputs.count("nproc")) {
    s.Value(
         "nproc", [](A & a) -> auto& { return a.nproc; },
         "Data-parallel processes on this machine (Gloo)")
        .Range(1, 64);
  }
  if (outputs.count("events")) {
    s.Value(
         "events", [](A & a) -> auto& { return a.events; },
         "Write one JSON line per step/eval")
        .Path();
  }
  if (outputs.count("json_out")) {
    AddJsonOutOption(
        s, [](A & a) -> auto& { return a.json_out; });
  }
  if (outputs.count("junit")) {
    s.Value(
         "junit", [](A & a) -> auto& { return a.junit; },
         "Write the checks as JUnit XML (one testcase per check)")
        .Path();
  }
  if (outputs.count("html")) {
    s.Value(
         "html", [](A & a) -> auto& { return a.html; },
         "Write the report as HTML with SVG plots")
        .Path();
  }
  return s;
}

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_JOB_COMMAND_H_
