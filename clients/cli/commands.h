// The `lrkv` subcommands. Each Add*Commands registers its subcommands on the
// app; the chosen one's callback stores its exit code in *exit_code.
#ifndef LRKV_CLIENTS_CLI_COMMANDS_H_
#define LRKV_CLIENTS_CLI_COMMANDS_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace lrkv::cli {

// Exit codes shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Prints "lrkv: error: <message>" on one line and returns kExitFailure.
int Fail(const absl::Status& status);

// `--products bf16|fp32` on `cmd` (eval, generate, bench generate): how prefill-sized
// products with bf16-stored weights are computed (model/stored_linear.h).
void AddProductsOption(CLI::App* cmd, std::string* products);

void AddModelCommands(CLI::App& app, int* exit_code);  // eval, generate
void AddSurgeryCommands(CLI::App& app,
                        int* exit_code);                // cache, convert, bench
void AddVerifyCommands(CLI::App& app, int* exit_code);  // verify
void AddHealCommands(CLI::App& app, int* exit_code);    // heal
void AddClientCommands(
    CLI::App& app, int* exit_code);  // register, upload, jobs, report, pipeline
void AddCompareCommands(CLI::App& app, int* exit_code);  // compare
// After AddSurgeryCommands, which creates `bench`.
void AddTokenizeCommands(CLI::App& app, int* exit_code);  // tokenize, bench tokenize
void AddBenchCommands(CLI::App& app, int* exit_code);  // bench decode

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_COMMANDS_H_
