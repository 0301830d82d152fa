// `bench decode`'s options and run, shared by `lrkv bench decode` and the
// kernels-only `lrkv-kernel-bench` (which needs neither LibTorch nor gRPC, so
// it runs on a GPU host that has only the CUDA driver).
#ifndef LRKV_CLIENTS_CLI_DECODE_BENCH_ARGS_H_
#define LRKV_CLIENTS_CLI_DECODE_BENCH_ARGS_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "kernels/decode_bench.h"

namespace lrkv::cli {

struct DecodeBenchArgs {
  kernels::DecodeBenchOptions bench;
  std::string contexts = "512,2048,8192,32768";
  std::string dtype = "bf16";
  std::string device = "cpu";
  std::string json_path;     // --json-out: the results as JSON in this file
  bool json_stdout = false;  // the results as JSON on stdout instead of the table
};

// Registers --heads, --source-kv-heads, --head-dim, --rank, --batch, --context,
// --dtype, --device, --threads, --iters and --json-out on `cmd`.
void AddDecodeBenchOptions(CLI::App* cmd, DecodeBenchArgs* args);

// Parses the list options, runs the bench on the chosen device, prints its
// table (or, with json_stdout, its JSON) and writes the JSON file if asked. InvalidArgument for bad options;
// FailedPrecondition for --device cuda without CUDA (not built, or no
// device).
absl::Status RunDecodeBenchArgs(DecodeBenchArgs args);

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_DECODE_BENCH_ARGS_H_
