// `bench decode`'s options and run (see decode_bench_args.h).
#include "clients/cli/decode_bench_args.h"

#include <fstream>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#ifdef LRKV_WITH_CUDA
#include "clients/cli/renamed_options.h"
#include "kernels/cuda/decode_bench_cuda.h"
#endif

namespace lrkv::cli {

void AddDecodeBenchOptions(CLI::App* cmd, DecodeBenchArgs* d) {
  cmd->add_option("--heads", d->bench.heads, "Query heads H");
  AddSourceKvHeads(cmd, &d->bench.kv_heads, "Source KV heads (default H)");
  cmd->add_option("--head-dim", d->bench.head_dim, "Head dim d_h");
  cmd->add_option("--rank", d->bench.rank, "LRKV rank r");
  cmd->add_option("--batch", d->bench.batch, "Sequences decoded together");
  cmd->add_option("--context", d->contexts, "Context lengths, comma-separated");
  cmd->add_option("--dtype", d->dtype, "Cache storage: bf16 | fp32");
  cmd->add_option("--device", d->device,
                  "cpu | cuda (the CUDA kernels, when built with nvcc)");
  cmd->add_option("--threads", d->bench.threads,
                  "OpenMP threads (default: all CPUs)");
  cmd->add_option("--iters", d->bench.iterations,
                  "Timed steps per variant and context");
  cmd->add_option("--json-out", d->json_path, "Write the results as JSON to this file");
}

absl::Status RunDecodeBenchArgs(DecodeBenchArgs a) {
  a.bench.contexts.clear();
  for (absl::string_view part : absl::StrSplit(a.contexts, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--context '", a.contexts, "' must be comma-separated integers"));
    }
    a.bench.contexts.push_back(v);
  }
  if (a.dtype == "bf16") {
    a.bench.dtype = kernels::CacheDType::kBF16;
  } else if (a.dtype == "fp32") {
    a.bench.dtype = kernels::CacheDType::kF32;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype '", a.dtype, "' must be bf16 or fp32"));
  }
  absl::StatusOr<kernels::DecodeBenchReport> report;
  if (a.device == "cpu") {
    report = kernels::RunDecodeBench(a.bench);
  } else if (a.device == "cuda") {
#ifdef LRKV_WITH_CUDA
    report = kernels::cuda::RunDecodeBenchCuda(a.bench);
#else
    return absl::FailedPreconditionError(
        "--device cuda: this build has no CUDA kernels (nvcc was not found "
        "when it was configured)");
#endif
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--device '", a.device, "' must be cpu or cuda"));
  }
  if (!report.ok()) return report.status();
  if (a.json_stdout) {
    std::cout << report->ToJson() << "\n";
  } else {
    std::cout << report->ToTable();
  }
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    out << report->ToJson() << "\n";
    if (!out) {
      return absl::PermissionDeniedError(
          absl::StrCat(a.json_path, ": cannot write"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lrkv::cli
