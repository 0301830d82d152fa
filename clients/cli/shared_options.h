// Options several commands take, declared once each (one name, one meaning,
// one help): each command's schema adds them with its own member.
#ifndef LRKV_CLIENTS_CLI_SHARED_OPTIONS_H_
#define LRKV_CLIENTS_CLI_SHARED_OPTIONS_H_

#include <string>
#include <utility>

#include "base/option_schema.h"

namespace lrkv::cli {

// --checkpoint PATH, required: the model a command reads (`help` says which
// files it takes).
template <typename Options, typename Field>
OptionSpec<Options>& AddCheckpointOption(OptionSchema<Options>& s, Field field,
                                         std::string help) {
  return s.Value("checkpoint", field, std::move(help)).Path().Required();
}

// --json-out FILE: the command's report or results, as JSON, in this file too.
template <typename Options, typename Field>
OptionSpec<Options>& AddJsonOutOption(OptionSchema<Options>& s, Field field) {
  return s.Value("json_out", field, "Also write the JSON report to this file")
      .Path();
}

// --products bf16|fp32 (eval, generate, bench generate, serve, bench serve):
// how prefill-sized products with bf16-stored weights are computed
// (runtime/stored_linear.h).
template <typename Options, typename Field>
OptionSpec<Options>& AddProductsOption(OptionSchema<Options>& s, Field field) {
  return s
      .Value("products", field,
             "Products of 2+ rows with bf16-stored weights (prefill, batched "
             "decode steps): bf16 rounds the activations to bf16 and sums in "
             "fp32 (llama.cpp's arithmetic; oneDNN or the AVX512-BF16 dot "
             "product), fp32 widens the weights (exact). One sequence's decode "
             "step and fp32 checkpoints are exact either way")
      .Choices({"bf16", "fp32"});
}

// --threads N (serve, bench serve): compute threads.
template <typename Options, typename Field>
OptionSpec<Options>& AddThreadsOption(OptionSchema<Options>& s, Field field) {
  return s
      .Value("threads", field,
             "Compute threads (0: OMP_NUM_THREADS, else all CPUs)")
      .Range(0, 1024);
}

}  // namespace lrkv::cli

#endif  // LRKV_CLIENTS_CLI_SHARED_OPTIONS_H_
