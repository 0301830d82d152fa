// `bench decode`'s options and run (see decode_bench_args.h).
#include "clients/cli/decode_bench_args.h"

#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "clients/cli/renamed_options.h"
#include "clients/cli/shared_options.h"
#ifdef LRKV_WITH_CUDA
#include "kernels/cuda/decode_bench_cuda.h"
#endif

namespace lrkv::cli {
namespace {

struct Outputs {
  std::string json_out;
};

const OptionSchema<Outputs>& OutputSchema() {
  static const OptionSchema<Outputs> schema = [] {
    OptionSchema<Outputs> s("bench decode");
    AddJsonOutOption(
        s, [](Outputs & o) -> auto& { return o.json_out; });
    return s;
  }();
  return schema;
}

}  // namespace

DecodeBenchFlags AddDecodeBenchOptions(CLI::App* cmd) {
  DecodeBenchFlags flags;
  flags.bench = AddSchemaFlags(cmd, kernels::DecodeBenchOptionSchema());
  flags.outputs = AddSchemaFlags(cmd, OutputSchema());
  RefuseRenamedOption(cmd, "--kv-heads", kSourceKvHeadsHint);
  RefuseRenamedOption(cmd, "--dtype", kCacheDtypeHint);
  RefuseRenamedOption(cmd, "--iters",
                      "renamed --iterations here (the timed steps); --iters is "
                      "the solver's iterations of `lrkv convert`");
  return flags;
}

absl::StatusOr<DecodeBenchArgs> ParseDecodeBenchFlags(
    const DecodeBenchFlags& flags) {
  DecodeBenchArgs args;
  auto job = ParseFlags(*flags.bench, kernels::DecodeBenchOptionSchema(),
                        kernels::DecodeBenchJobOptions{});
  if (!job.ok()) return job.status();
  auto outputs = ParseFlags(*flags.outputs, OutputSchema(), Outputs{});
  if (!outputs.ok()) return outputs.status();
  args.job = *std::move(job);
  args.json_out = outputs->json_out;
  return args;
}

absl::Status RunDecodeBenchArgs(const DecodeBenchArgs& a) {
  absl::StatusOr<kernels::DecodeBenchReport> report;
  if (a.job.device == "cpu") {
    report = kernels::RunDecodeBench(a.job.bench);
  } else {
#ifdef LRKV_WITH_CUDA
    report = kernels::cuda::RunDecodeBenchCuda(a.job.bench);
#else
    return absl::FailedPreconditionError(
        "--device cuda: this build has no CUDA kernels (nvcc was not found "
        "when it was configured)");
#endif
  }
  if (!report.ok()) return report.status();
  if (a.json_stdout) {
    std::cout << report->ToJson() << "\n";
  } else {
    std::cout << report->ToTable();
  }
  if (!a.json_out.empty()) {
    std::ofstream out(a.json_out);
    out << report->ToJson() << "\n";
    if (!out) {
      return absl::PermissionDeniedError(
          absl::StrCat(a.json_out, ": cannot write"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lrkv::cli
