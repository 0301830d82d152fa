// lrkv-kernel-bench: `lrkv bench decode` without the rest of lrkv (no LibTorch,
// no gRPC, no model files), for timing the decode kernels on a machine that
// has only a CPU or a GPU driver.
#include <iostream>

#include "CLI/CLI.hpp"
#include "clients/cli/decode_bench_args.h"

int main(int argc, char** argv) {
  CLI::App app{
      "lrkv-kernel-bench: decode-step time of MHA, GQA, MLA and LRKV kernels "
      "at equal cache (the options of `lrkv bench decode`)"};
  lrkv::cli::DecodeBenchArgs args;
  lrkv::cli::AddDecodeBenchOptions(&app, &args);
  CLI11_PARSE(app, argc, argv);
  const absl::Status st = lrkv::cli::RunDecodeBenchArgs(args);
  if (!st.ok()) {
    std::cerr << "lrkv-kernel-bench: error: " << st.message() << "\n";
    return 1;
  }
  return 0;
}
