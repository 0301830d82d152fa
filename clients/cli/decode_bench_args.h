// `bench decode`'s options and run, shared by `lrkv bench decode` and the
// kernels-only `lrkv-kernel-bench` (which needs neither LibTorch nor gRPC, so
// it runs on a GPU host that has only the CUDA driver). The options are
// kernels/decode_bench_options_schema.h's, which lrkvd's bench jobs parse too.
#ifndef LRKV_CLIENTS_CLI_DECODE_BENCH_ARGS_H_
#define LRKV_CLIENTS_CLI_DECODE_BENCH_ARGS_H_

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "clients/cli/schema_flags.h"
#include "kernels/decode_bench_options_schema.h"

namespace lrkv::cli {

struct DecodeBenchArgs {
  kernels::DecodeBenchJobOptions job;
  std::string json_out;      // --json-out: the results as JSON in this file
  bool json_stdout = false;  // the results as JSON on stdout instead of the table
};

// The flags of `bench decode` on a command: the bench's schema and --json-out.
struct DecodeBenchFlags {
  std::shared_ptr<SchemaFlags> bench, outputs;
};
// Registers them on `cmd` (--iters, the timed steps' old name, refused).
DecodeBenchFlags AddDecodeBenchOptions(CLI::App* cmd);
// The options the command line gave (InvalidArgument naming the flag).
absl::StatusOr<DecodeBenchArgs> ParseDecodeBenchFlags(
    const DecodeBenchFlags& flags);

// Runs the bench (args.job.bench.rank already resolved) on the chosen device,
// prints its table (or, with json_stdout, its JSON) and writes the JSON file
// if asked. FailedPrecondition for --device cuda without CUDA (not built, or
// no device).
absl::Status RunDecodeBenchArgs(const DecodeBenchArgs& args);

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_DECODE_BENCH_ARGS_H_
