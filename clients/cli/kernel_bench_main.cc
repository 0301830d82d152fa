// lrkv-kernel-bench: `lrkv bench decode` without the rest of lrkv (no LibTorch,
// no gRPC, no model files), for timing the decode kernels on a machine that
// has only a CPU or a GPU driver. The budget planner is lrkv's: here the LRKV
// rank is --rank, DecodeBenchOptions' default (51) when not given.
#include <iostream>

#include "CLI/CLI.hpp"
#include "clients/cli/decode_bench_args.h"

namespace {

int Error(const absl::Status& st) {
  std::cerr << "lrkv-kernel-bench: error: " << st.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "lrkv-kernel-bench: decode-step time of MHA, GQA, MLA and LRKV kernels "
      "at equal cache (the options of `lrkv bench decode`)"};
  const lrkv::cli::DecodeBenchFlags flags =
      lrkv::cli::AddDecodeBenchOptions(&app);
  CLI11_PARSE(app, argc, argv);
  auto args = lrkv::cli::ParseDecodeBenchFlags(flags);
  if (!args.ok()) return Error(args.status());
  if (args->job.budget) {
    return Error(absl::InvalidArgumentError(
        "--budget needs lrkv's budget planner (`lrkv bench decode`); give "
        "--rank here"));
  }
  args->job.bench.rank =
      args->job.rank.value_or(lrkv::kernels::DecodeBenchOptions{}.rank);
  const absl::Status st = lrkv::cli::RunDecodeBenchArgs(*args);
  return st.ok() ? 0 : Error(st);
}
