// Options renamed so that one name has one meaning across commands: the old
// spelling stays declared, hidden from --help, and is refused naming the new.
#ifndef LRKV_CLIENTS_CLI_RENAMED_OPTIONS_H_
#define LRKV_CLIENTS_CLI_RENAMED_OPTIONS_H_

#include <set>
#include <string>

#include "CLI/CLI.hpp"

namespace lrkv::cli {

// The old spellings declared (`lrkv options` lists them apart).
inline std::set<const CLI::Option*>& RenamedOptions() {
  static auto* options = new std::set<const CLI::Option*>();
  return *options;
}

// An old spelling of an option of `cmd`, hidden from --help, refused with
// `hint`.
inline void RefuseRenamedOption(CLI::App* cmd, const std::string& old_flag,
                                const std::string& hint) {
  CLI::Option* option = cmd->add_option_function<std::string>(
      old_flag, [old_flag, hint](const std::string&) {
        throw CLI::ValidationError(old_flag, hint);
      });
  option->group("");
  RenamedOptions().insert(option);
}

// `--kv-heads` in the commands that take a source shape (`cache`, `bench
// decode`): the KV heads of the model written elsewhere (convert's GQA target,
// init's model's own), so the source's are --source-kv-heads there.
inline constexpr char kSourceKvHeadsHint[] =
    "renamed --source-kv-heads here (the source's KV heads); --kv-heads is the "
    "KV heads of the model a command writes (the GQA target of `lrkv convert`)";

// `--dtype` where it meant the KV cache's storage: `--cache-dtype` everywhere.
inline constexpr char kCacheDtypeHint[] =
    "renamed --cache-dtype (bf16, f32, q8, q4; a comma list in the benches), "
    "the name every command gives the KV cache's storage";

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_RENAMED_OPTIONS_H_
