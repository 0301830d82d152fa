// `lrkv`: the command-line front end. Commands parse arguments and call the core
// library; errors print one line naming the file and the problem.
#include <cstdio>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "model/language_model.h"
#include "model/text_corpus.h"
#include "nlohmann/json.hpp"

namespace {

// Exit codes shared by every command.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int Fail(const absl::Status& status) {
  std::cerr << "lrkv: error: " << status.message() << "\n";
  return kExitFailure;
}

int RunEval(const std::string& checkpoint, const std::string& text, bool as_json) {
  auto docs = lrkv::ReadDocuments(text);
  if (!docs.ok()) return Fail(docs.status());
  auto model = lrkv::LanguageModel::Load(checkpoint);
  if (!model.ok()) return Fail(model.status());
  auto r = (*model)->Perplexity(*docs);
  if (!r.ok()) return Fail(r.status());
  if (as_json) {
    nlohmann::json j = {{"checkpoint", checkpoint}, {"text", text},
                        {"stories", r->documents},  {"tokens", r->tokens},
                        {"mean_nll", r->mean_nll},  {"perplexity", r->perplexity},
                        {"seconds", r->seconds}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("checkpoint  %s\ntext        %s\nstories     %lld\ntokens      %lld\n"
                "mean NLL    %.6f nats/token\nperplexity  %.4f\ntime        %.2f s\n",
                checkpoint.c_str(), text.c_str(), static_cast<long long>(r->documents),
                static_cast<long long>(r->tokens), r->mean_nll, r->perplexity,
                r->seconds);
  }
  return kExitOk;
}

int RunGenerate(const std::string& checkpoint, const std::string& prompt,
                int64_t max_tokens) {
  auto model = lrkv::LanguageModel::Load(checkpoint);
  if (!model.ok()) return Fail(model.status());
  auto r = (*model)->Generate(prompt, max_tokens);
  if (!r.ok()) return Fail(r.status());
  std::cout << prompt << r->continuation << "\n";
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lrkv: LRKV model surgery and verification"};
  app.require_subcommand(1);

  std::string checkpoint, text, prompt;
  bool as_json = false;
  int64_t max_tokens = 32;

  auto* eval = app.add_subcommand("eval", "Perplexity of a checkpoint on a text file");
  eval->add_option("--checkpoint", checkpoint, "GGUF file or safetensors directory")
      ->required();
  eval->add_option("--text", text, "Text file; documents separated by <|endoftext|> lines")
      ->required();
  eval->add_flag("--json", as_json, "Print the result as JSON");

  auto* gen = app.add_subcommand("generate", "Greedy continuation of a prompt");
  gen->add_option("--checkpoint", checkpoint, "GGUF file or safetensors directory")
      ->required();
  gen->add_option("--prompt", prompt, "Prompt text")->required();
  gen->add_option("--max-tokens", max_tokens, "New tokens at most")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  if (*eval) return RunEval(checkpoint, text, as_json);
  if (*gen) return RunGenerate(checkpoint, prompt, max_tokens);
  return kExitUsage;
}
