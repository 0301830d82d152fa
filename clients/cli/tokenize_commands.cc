// `lrkv tokenize`: the ids a checkpoint's tokenizer gives a text (and their decoding),
// and `lrkv bench tokenize`: its single-thread throughput on a text file.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clients/cli/commands.h"
#include "clients/cli/schema_flags.h"
#include "clients/cli/shared_options.h"
#include "formats/text_corpus.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"

namespace lrkv::cli {
namespace {

struct TokenizeArgs {
  std::string checkpoint, text;
  std::optional<std::string> prompt;
  bool add_special = false, decode = false;
};

struct TokenizeBenchArgs {
  std::string checkpoint, text;
  int repeats = 5;
};

constexpr char kTokenizerCheckpointHelp[] =
    "GGUF file, safetensors checkpoint, or a folder with tokenizer.json";

const OptionSchema<TokenizeArgs>& TokenizeSchema() {
  using A = TokenizeArgs;
  static const OptionSchema<A> schema = [] {
    OptionSchema<A> s("tokenize");
    AddCheckpointOption(
        s, [](A & a) -> auto& { return a.checkpoint; },
        kTokenizerCheckpointHelp);
    s.Value(
         "text", [](A & a) -> auto& { return a.text; },
         "Text file; one id list per <|endoftext|>-separated document")
        .Path();
    s.Value(
        "prompt", [](A & a) -> auto& { return a.prompt; },
        "A text given on the command line");
    s.Value(
        "add_special", [](A & a) -> auto& { return a.add_special; },
        "Add BOS/EOS as the tokenizer's configuration says (default: none)");
    s.Value(
        "decode", [](A & a) -> auto& { return a.decode; },
        "Also print each id list decoded back to text");
    s.Check([](const A& a, OptionSource) -> absl::Status {
      if (a.text.empty() == !a.prompt.has_value()) {
        return absl::InvalidArgumentError(
            "tokenize: give one of --text FILE or --prompt TEXT");
      }
      return absl::OkStatus();
    });
    return s;
  }();
  return schema;
}

const OptionSchema<TokenizeBenchArgs>& TokenizeBenchSchema() {
  using A = TokenizeBenchArgs;
  static const OptionSchema<A> schema = [] {
    OptionSchema<A> s("bench tokenize");
    AddCheckpointOption(
        s, [](A & a) -> auto& { return a.checkpoint; },
        kTokenizerCheckpointHelp);
    s.Value(
         "text", [](A & a) -> auto& { return a.text; },
         "Text file (documents separated by <|endoftext|>)")
        .Path()
        .Required();
    s.Value(
         "repeats", [](A & a) -> auto& { return a.repeats; },
         "Timed warm passes after the cold one")
        .Range(1, 1000);
    return s;
  }();
  return schema;
}

int RunTokenize(const TokenizeArgs& a) {
  auto tok = LoadTokenizer(a.checkpoint);
  if (!tok.ok()) return Fail(tok.status());
  std::vector<std::string> docs;
  if (!a.text.empty()) {
    auto read = ReadDocuments(a.text);
    if (!read.ok()) return Fail(read.status());
    docs = std::move(*read);
  } else {
    docs.push_back(*a.prompt);
  }
  nlohmann::json ids = nlohmann::json::array(), decoded = nlohmann::json::array();
  for (const auto& d : docs) {
    const std::vector<int32_t> t = tok->Encode(d, a.add_special);
    ids.push_back(t);
    if (a.decode) decoded.push_back(tok->Decode(t));
  }
  if (Globals().json) {
    nlohmann::json j = {{"ids", ids}};
    if (a.decode) j["decoded"] = decoded;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string line;
    for (const auto& id : ids[i]) line += (line.empty() ? "" : " ") + id.dump();
    std::cout << line << "\n";
    if (a.decode) std::cout << decoded[i].get<std::string>() << "\n";
  }
  return kExitOk;
}

int RunTokenizeBench(const TokenizeBenchArgs& a) {
  auto tok = LoadTokenizer(a.checkpoint);
  if (!tok.ok()) return Fail(tok.status());
  auto docs = ReadDocuments(a.text);
  if (!docs.ok()) return Fail(docs.status());
  size_t bytes = 0;
  for (const auto& d : *docs) bytes += d.size();
  std::vector<double> mbps;
  size_t tokens = 0;
  // Repeat 0 is the cold pass (empty piece cache); the rest are timed warm.
  double cold = 0;
  for (int r = 0; r <= a.repeats; ++r) {
    tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& d : *docs) tokens += tok->Encode(d).size();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    (r == 0 ? cold : mbps.emplace_back()) = bytes / s / 1e6;
  }
  std::sort(mbps.begin(), mbps.end());
  if (Globals().json) {
    std::cout << nlohmann::json({{"tokenizer", a.checkpoint},
                                 {"kind", std::string(tok->kind())},
                                 {"documents", docs->size()},
                                 {"bytes", bytes},
                                 {"tokens", tokens},
                                 {"threads", 1},
                                 {"cold_mb_per_s", cold},
                                 {"warm_passes", a.repeats},
                                 {"warm_mb_per_s_median", mbps[mbps.size() / 2]},
                                 {"warm_mb_per_s_min", mbps.front()},
                                 {"warm_mb_per_s_max", mbps.back()}})
                     .dump(2)
              << "\n";
    return kExitOk;
  }
  std::printf(
      "tokenizer   %s (%s, %lld tokens)\ntext        %s: %zu documents, %zu bytes, %zu "
      "tokens (%.2f bytes/token)\nthreads     1\ncold pass   %.2f MB/s\nwarm passes %d: "
      "median %.2f MB/s, min %.2f, max %.2f\n",
      a.checkpoint.c_str(), std::string(tok->kind()).c_str(),
      static_cast<long long>(tok->size()), a.text.c_str(), docs->size(), bytes, tokens,
      static_cast<double>(bytes) / std::max<size_t>(tokens, 1), cold, a.repeats,
      mbps[mbps.size() / 2], mbps.front(), mbps.back());
  return kExitOk;
}

}  // namespace

void AddTokenizeCommands(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("tokenize", "Token ids of a text under a checkpoint's tokenizer");
  AddSchemaCommand(cmd, TokenizeSchema(), exit_code, RunTokenize);
  auto* bench = app.get_subcommand("bench")->add_subcommand(
      "tokenize", "Single-thread tokenizer throughput (MB/s) on a text file");
  AddSchemaCommand(bench, TokenizeBenchSchema(), exit_code, RunTokenizeBench);
}

}  // namespace lrkv::cli
