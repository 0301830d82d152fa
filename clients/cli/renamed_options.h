// Options renamed so that one name has one meaning across commands: the old
// spelling stays declared, hidden from --help, and is refused naming the new.
#ifndef LRKV_CLIENTS_CLI_RENAMED_OPTIONS_H_
#define LRKV_CLIENTS_CLI_RENAMED_OPTIONS_H_

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace lrkv::cli {

// An old spelling of an option of `cmd`, hidden from --help, refused with
// `hint`.
inline void RefuseRenamedOption(CLI::App* cmd, const std::string& old_flag,
                                const std::string& hint) {
  cmd->add_option_function<std::string>(old_flag,
                                        [old_flag, hint](const std::string&) {
                                          throw CLI::ValidationError(old_flag,
                                                                     hint);
                                        })
      ->group("");
}

// The KV heads of a source shape (`cache`, `bench convert`, `bench decode`):
// --source-kv-heads, which `--kv-heads` (convert's GQA target, and init's
// model's own) once also named here.
inline CLI::Option* AddSourceKvHeads(CLI::App* cmd, int64_t* kv_heads,
                                     const std::string& help) {
  RefuseRenamedOption(cmd, "--kv-heads",
                      "renamed --source-kv-heads here (the source's KV heads); "
                      "--kv-heads is the GQA target of `lrkv convert`");
  return cmd->add_option("--source-kv-heads", *kv_heads, help);
}

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_RENAMED_OPTIONS_H_
