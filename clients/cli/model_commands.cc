// `lrkv eval` and `lrkv generate`: perplexity and greedy continuation of a
// checkpoint.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "clients/cli/commands.h"
#include "clients/cli/schema_flags.h"
#include "clients/cli/shared_options.h"
#include "formats/text_corpus.h"
#include "kernels/decode_attention.h"
#include "nlohmann/json.hpp"
#include "runtime/blas_core.h"
#include "runtime/cache_dtype.h"
#include "runtime/language_model.h"
#include "runtime/threads.h"

namespace lrkv::cli {
namespace {

struct EvalArgs {
  std::string checkpoint, text;
  int64_t limit = 0;  // documents at most (0: all)
  std::string products = "bf16";
  std::string cache_dtype = "none";
  bool q8_query = false;
};

struct GenerateArgs {
  std::string checkpoint, prompt;
  int64_t max_tokens = 32;
  std::string products = "bf16";
};

constexpr char kModelCheckpointHelp[] = "GGUF file or safetensors directory";

const OptionSchema<EvalArgs>& EvalSchema() {
  using A = EvalArgs;
  static const OptionSchema<A> schema = [] {
    OptionSchema<A> s("eval");
    AddCheckpointOption(
        s, [](A & a) -> auto& { return a.checkpoint; }, kModelCheckpointHelp);
    s.Value(
         "text", [](A & a) -> auto& { return a.text; },
         "Text file; documents separated by <|endoftext|> lines")
        .Path()
        .Required();
    s.Value(
         "limit", [](A & a) -> auto& { return a.limit; },
         "Documents of --text to evaluate, the first ones (0: all); each is "
         "scored in windows of the model's context, 2048 tokens at most")
        .Min(0);
    AddProductsOption(
        s, [](A & a) -> auto& { return a.products; });
    std::vector<std::string> storages = {"none"};
    for (const auto& name : CacheDtypeNames()) storages.push_back(name);
    s.Value(
         "cache_dtype", [](A & a) -> auto& { return a.cache_dtype; },
         "Score through the serving decode engine's KV cache stored in this "
         "dtype (q8, q4: ggml's Q8_0, Q4_0), every position's K/V written to "
         "the cache and read back by attention, as llama.cpp's perplexity "
         "does; none: one forward pass per window, no cache")
        .Choices(storages);
    s.Value(
        "q8_query", [](A & a) -> auto& { return a.q8_query; },
        "With --cache-dtype: round each query to Q8_0 before its product with "
        "the keys, as llama.cpp's CPU attention does over a Q8_0 or Q4_0 key "
        "cache");
    return s;
  }();
  return schema;
}

const OptionSchema<GenerateArgs>& GenerateSchema() {
  using A = GenerateArgs;
  static const OptionSchema<A> schema = [] {
    OptionSchema<A> s("generate");
    AddCheckpointOption(
        s, [](A & a) -> auto& { return a.checkpoint; }, kModelCheckpointHelp);
    s.Value(
         "prompt", [](A & a) -> auto& { return a.prompt; }, "Prompt text")
        .Required();
    s.Value(
         "max_tokens", [](A & a) -> auto& { return a.max_tokens; },
         "New tokens at most")
        .Range(0, 1000000);
    AddProductsOption(
        s, [](A & a) -> auto& { return a.products; });
    return s;
  }();
  return schema;
}

LanguageModelOptions ModelOptions(const std::string& products) {
  LanguageModelOptions o;
  o.bf16_activations = products == "bf16";
  return o;
}

// What LanguageModel::products() means, for the printed result.
std::string DescribeProducts(const std::string& products) {
  return products == "bf16" ? "bf16 (activations rounded to bf16 x bf16 weights, fp32 sums)"
                            : "fp32 (weights widened to fp32)";
}


int RunEval(const EvalArgs& a) {
  auto docs = ReadDocuments(a.text);
  if (!docs.ok()) return Fail(docs.status());
  if (a.limit > 0 && static_cast<int64_t>(docs->size()) > a.limit) docs->resize(a.limit);
  auto model = LanguageModel::Load(a.checkpoint, ModelOptions(a.products));
  if (!model.ok()) return Fail(model.status());
  StageProgress progress("eval");
  progress.Sink()(absl::StrCat("perplexity of ", docs->size(), " documents"), 1, 1);
  auto r = (*model)->Perplexity(*docs, InterruptCheck(),
                                a.cache_dtype == "none" ? "" : a.cache_dtype,
                                a.q8_query);
  progress.Finish();
  if (!r.ok()) return Fail(r.status());
  if (Globals().json) {
    nlohmann::json j = {
        {"checkpoint", a.checkpoint},
        {"text", a.text},
        {"stories", r->documents},
        {"tokens", r->tokens},
        {"mean_nll", r->mean_nll},
        {"perplexity", r->perplexity},
        {"seconds", r->seconds},
        {"products", r->products},
        {"cache_dtype", r->cache_dtype.empty() ? "none" : r->cache_dtype},
        {"decode_mode", r->decode_mode},
        {"provenance", BuildProvenance()}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "checkpoint  %s\ntext        %s\nstories     %lld\ntokens      %lld\n"
        "mean NLL    %.6f nats/token\nperplexity  %.4f\ntime        %.2f s (%.0f tokens/s)\n"
        "products    %s\n",
        a.checkpoint.c_str(), a.text.c_str(),
        static_cast<long long>(r->documents), static_cast<long long>(r->tokens),
        r->mean_nll, r->perplexity, r->seconds, r->tokens / std::max(r->seconds, 1e-9),
        DescribeProducts(r->products).c_str());
    if (!r->cache_dtype.empty()) {
      std::printf(
          "KV cache    %s, %s decode engine (every position through the "
          "cache)\n",
          r->cache_dtype.c_str(), r->decode_mode.c_str());
    }
  }
  return kExitOk;
}

int RunGenerate(const GenerateArgs& a) {
  auto model = LanguageModel::Load(a.checkpoint, ModelOptions(a.products));
  if (!model.ok()) return Fail(model.status());
  auto r = (*model)->Generate(a.prompt, a.max_tokens);
  if (!r.ok()) return Fail(r.status());
  if (Globals().json) {
    std::cout << nlohmann::json({{"checkpoint", a.checkpoint},
                                 {"prompt", a.prompt},
                                 {"continuation", r->continuation}})
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
    return kExitOk;
  }
  std::cout << a.prompt << r->continuation << "\n";
  return kExitOk;
}

}  // namespace

void AddModelCommands(CLI::App& app, int* exit_code) {
  auto* eval =
      app.add_subcommand("eval", "Perplexity of a checkpoint on a text file");
  AddSchemaCommand(eval, EvalSchema(), exit_code, RunEval);
  auto* gen = app.add_subcommand("generate", "Greedy continuation of a prompt");
  AddSchemaCommand(gen, GenerateSchema(), exit_code, RunGenerate);

  auto* sysinfo = app.add_subcommand(
      "sysinfo", "What this build runs on here: kernel builds, BLAS core, threads");
  sysinfo->callback([exit_code] {
    const std::string blas = OpenBlasCore();
    if (Globals().json) {
      nlohmann::json j = BuildProvenance();
      j["decode_kernels"] = kernels::KernelIsa();
      j["tiled_bf16_kernel"] = kernels::TiledKernelAvailable();
      j["blas_core"] = blas;
      std::cout << j.dump(2) << "\n";
      *exit_code = kExitOk;
      return;
    }
    std::printf("decode kernels: %s%s\n", kernels::KernelIsa(),
                kernels::TiledKernelAvailable() ? " (+ tiled avx512-bf16)" : "");
    std::printf("blas core: %s%s\n", blas.empty() ? "(not OpenBLAS)" : blas.c_str(),
                std::getenv("OPENBLAS_CORETYPE") != nullptr ? " (OPENBLAS_CORETYPE)" : "");
    std::printf("threads: %d\n", ThreadCount());
    *exit_code = kExitOk;
  });

  auto* version = app.add_subcommand("version", "lrkv's version and the commit it was built from");
  version->callback([exit_code] {
    if (Globals().json) {
      std::cout << BuildProvenance().dump(2) << "\n";
    } else {
      std::cout << VersionString() << "\n";
    }
    *exit_code = kExitOk;
  });
}

}  // namespace lrkv::cli
