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
#include "formats/text_corpus.h"
#include "kernels/decode_attention.h"
#include "nlohmann/json.hpp"
#include "runtime/blas_core.h"
#include "runtime/language_model.h"
#include "runtime/threads.h"

namespace lrkv::cli {
namespace {

struct EvalArgs {
  std::string checkpoint, text;
  int64_t limit = 0;  // documents at most (0: all)
  std::string products = "bf16";
};

struct GenerateArgs {
  std::string checkpoint, prompt;
  int64_t max_tokens = 32;
  std::string products = "bf16";
};

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
  auto r = (*model)->Perplexity(*docs, InterruptCheck());
  progress.Finish();
  if (!r.ok()) return Fail(r.status());
  if (Globals().json) {
    nlohmann::json j = {
        {"checkpoint", a.checkpoint}, {"text", a.text},
        {"stories", r->documents},    {"tokens", r->tokens},
        {"mean_nll", r->mean_nll},    {"perplexity", r->perplexity},
        {"seconds", r->seconds},      {"products", r->products},
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

void AddProductsOption(CLI::App* cmd, std::string* products) {
  cmd->add_option(
         "--products", *products,
         "Products of 2+ rows with bf16-stored weights (prefill, batched "
         "decode steps): bf16 rounds the activations to bf16 and sums in fp32 "
         "(llama.cpp's arithmetic; oneDNN or the AVX512-BF16 dot product), "
         "fp32 widens the weights (exact). One sequence's decode step and "
         "fp32 checkpoints are exact either way")
      ->check(CLI::IsMember({"bf16", "fp32"}))
      ->capture_default_str();
}

void AddModelCommands(CLI::App& app, int* exit_code) {
  auto eval_args = std::make_shared<EvalArgs>();
  auto* eval =
      app.add_subcommand("eval", "Perplexity of a checkpoint on a text file");
  eval->add_option("--checkpoint", eval_args->checkpoint,
                   "GGUF file or safetensors directory")
      ->required();
  eval->add_option("--text", eval_args->text,
                   "Text file; documents separated by <|endoftext|> lines")
      ->required();
  eval->add_option("--limit", eval_args->limit,
                   "Documents of --text to evaluate, the first ones (0: all); each is "
                   "scored in windows of the model's context, 2048 tokens at most")
      ->check(kNotNegative)
      ->capture_default_str();
  AddProductsOption(eval, &eval_args->products);
  eval->callback([eval_args, exit_code] { *exit_code = RunEval(*eval_args); });

  auto gen_args = std::make_shared<GenerateArgs>();
  auto* gen = app.add_subcommand("generate", "Greedy continuation of a prompt");
  gen->add_option("--checkpoint", gen_args->checkpoint,
                  "GGUF file or safetensors directory")
      ->required();
  gen->add_option("--prompt", gen_args->prompt, "Prompt text")->required();
  gen->add_option("--max-tokens", gen_args->max_tokens, "New tokens at most")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  AddProductsOption(gen, &gen_args->products);
  gen->callback([gen_args, exit_code] { *exit_code = RunGenerate(*gen_args); });

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
