// `lrkv bench decode`: decode-step kernels of MHA, budget-matched GQA and MLA,
// and LRKV, timed interleaved in one run with bytes moved and achieved
// bandwidth.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/median.h"
#include "base/status_macros.h"
#include "clients/cli/commands.h"
#include "clients/cli/decode_bench_args.h"
#include "clients/cli/remote.h"
#include "clients/cli/renamed_options.h"
#include "clients/cli/shared_options.h"
#include "kernels/cache_dtype_option.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "runtime/generate_bench.h"
#include "runtime/generate_bench_options_schema.h"
#include "runtime/threads.h"
#include "surgery/cache_accounting.h"
#include "surgery/conversion_options.h"

namespace lrkv::cli {
namespace {

// The attention shape timed: the checkpoint's (QK-norm included, as lrkvd's
// bench job plans it), else the flags'.
int RunDecode(DecodeBenchArgs a, const std::string& checkpoint) {
  AttentionShape shape;
  if (!checkpoint.empty()) {
    auto ckpt = Checkpoint::Open(checkpoint);
    if (!ckpt.ok()) return Fail(ckpt.status());
    shape = ShapeOf((*ckpt)->config());
    a.job.bench.heads = shape.heads;
    a.job.bench.kv_heads = shape.source_kv_heads();
    a.job.bench.head_dim = shape.head_dim;
  } else {
    shape.heads = a.job.bench.heads;
    shape.kv_heads = a.job.bench.kv_heads;
    shape.head_dim = a.job.bench.head_dim;
  }
  auto rank = LrkvRankFor(shape, a.job.rank, a.job.budget);
  if (!rank.ok()) return Fail(rank.status());
  a.job.bench.rank = *rank;
  a.json_stdout = Globals().json;
  const absl::Status st = RunDecodeBenchArgs(a);
  return st.ok() ? kExitOk : Fail(st);
}

// bench generate's options beyond the timing schema's: what is timed, and
// against what.
struct GenerateArgs {
  std::string checkpoint, source, products = "bf16";
  std::string against_llama_cpp, llama_cpp_source;
};

const OptionSchema<GenerateArgs>& GenerateArgsSchema() {
  using A = GenerateArgs;
  static const OptionSchema<A> schema = [] {
    OptionSchema<A> s("bench generate");
    AddCheckpointOption(
        s, [](A & a) -> auto& { return a.checkpoint; },
        "Checkpoint (usually converted)");
    s.Value(
         "source", [](A & a) -> auto& { return a.source; },
         "The source model, timed beside it")
        .Path();
    AddProductsOption(
        s, [](A & a) -> auto& { return a.products; });
    s.Value(
         "against_llama_cpp",
         [](A & a) -> auto& { return a.against_llama_cpp; },
         "A GGUF file of the same model: llama.cpp (node-llama-cpp, CPU, F16 "
         "KV cache) runs it in the same run, and the ratios are printed")
        .Path();
    s.Value(
         "llama_cpp_source", [](A & a) -> auto& { return a.llama_cpp_source; },
         "The source model's GGUF: llama.cpp runs it too, and the converted "
         "model's step in llama.cpp is printed against it (e.g. an MLA "
         "deepseek2 export against the source)")
        .Path();
    s.Check([](const A& a, OptionSource) -> absl::Status {
      if (!a.llama_cpp_source.empty() && a.against_llama_cpp.empty()) {
        return absl::InvalidArgumentError(
            "--llama-cpp-source times the source in llama.cpp beside "
            "--against-llama-cpp: give both");
      }
      return absl::OkStatus();
    });
    return s;
  }();
  return schema;
}

// bench decode's --checkpoint.
struct DecodeCheckpoint {
  std::string checkpoint;
};

const OptionSchema<DecodeCheckpoint>& DecodeCheckpointSchema() {
  static const OptionSchema<DecodeCheckpoint> schema = [] {
    OptionSchema<DecodeCheckpoint> s("bench decode");
    s.Value(
         "checkpoint",
         [](DecodeCheckpoint & a) -> auto& { return a.checkpoint; },
         "Take H, H_kv and d_h from this checkpoint (needed with --server)")
        .Path();
    return s;
  }();
  return schema;
}

// llama.cpp on `gguf` (tests/js/llama_cpp_bench.mjs through node, installed by
// scripts/setup.sh): the same context pattern and step count, as a row to print.
absl::StatusOr<GenerateBenchRow> RunLlamaCpp(const std::string& gguf,
                                             const GenerateBenchOptions& o,
                                             const std::string& engine) {
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(gguf));
  if (ckpt->format() != CheckpointFormat::kGguf) {
    return absl::InvalidArgumentError(
        absl::StrCat("--against-llama-cpp ", gguf, ": not a GGUF file"));
  }
  const std::string js = std::string(LRKV_JS_DIR) + "/llama_cpp_bench.mjs";
  const std::string out = (std::filesystem::temp_directory_path() /
                           absl::StrCat("lrkv-llama-cpp-", getpid(), ".json"))
                              .string();
  auto quote = [](const std::string& s) { return "'" + absl::StrReplaceAll(s, {{"'", "'\\''"}}) + "'"; };
  const std::string cmd = absl::StrCat("node ", quote(js), " ", quote(gguf), " ", o.context, " ",
                                       o.tokens, " ", ThreadCount(), " ",
                                       ckpt->config().vocab_size, " ", quote(out));
  if (std::system(cmd.c_str()) != 0) {
    std::remove(out.c_str());
    return absl::FailedPreconditionError(absl::StrCat(
        "llama.cpp (", cmd, ") failed; node and node-llama-cpp come from scripts/setup.sh"));
  }
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::remove(out.c_str());
  if (!j.is_object() || !j.contains("step_ms") || j["step_ms"].empty()) {
    return absl::InternalError("llama.cpp's bench wrote no timings");
  }
  GenerateBenchRow row;
  row.model = "llama.cpp";
  row.engine = engine;
  row.cache = "f16";  // llama.cpp's default cache type
  row.cache_layout = "ggml";
  row.context = o.context;
  row.prefill_seconds = j["prefill_seconds"].get<double>();
  row.prefill_tokens_per_second = (o.context - 1) / row.prefill_seconds;
  SetDecodeSteps(j["step_ms"].get<std::vector<double>>(), &row);
  return row;
}

// llama.cpp's step on the converted model's GGUF against its step on the
// source's GGUF, both timed in this run.
void PrintLlamaCppSourceRatio(const GenerateBenchRow& converted,
                              const GenerateBenchRow& source) {
  std::printf(
      "\nllama.cpp, converted vs source (same run): decode step %.2f ms vs "
      "%.2f "
      "ms, %.2fx the source's time; prefill %.2fx its tokens/s\n",
      converted.step_ms_median, source.step_ms_median,
      converted.step_ms_median / source.step_ms_median,
      converted.prefill_tokens_per_second / source.prefill_tokens_per_second);
}

// Each round's median step of `r` over `ref`'s in the same round; empty when
// there is no ref or r is it.
std::vector<double> RoundRatios(const GenerateBenchRow& r,
                                const GenerateBenchRow* ref) {
  std::vector<double> ratios;
  if (ref == nullptr || ref == &r) return ratios;
  for (size_t i = 0; i < r.round_step_ms_median.size() &&
                     i < ref->round_step_ms_median.size();
       ++i) {
    ratios.push_back(r.round_step_ms_median[i] / ref->round_step_ms_median[i]);
  }
  return ratios;
}

// The row of `rows` matching `match`, or null.
template <typename Match>
const GenerateBenchRow* FindRow(const std::vector<GenerateBenchRow>& rows,
                                Match match) {
  const auto it = std::find_if(rows.begin(), rows.end(), match);
  return it == rows.end() ? nullptr : &*it;
}

// The source's row with r's cache storage: what "faster than its source"
// compares against.
const GenerateBenchRow* SourceRowFor(
    const GenerateBenchRow& r, const std::vector<GenerateBenchRow>& rows) {
  return FindRow(rows, [&](const GenerateBenchRow& x) {
    return x.model == "source" && x.cache == r.cache;
  });
}

// The same model and engine with the first storage timed: what a smaller
// cache is judged against.
const GenerateBenchRow* FirstCacheRowFor(
    const GenerateBenchRow& r, const std::vector<GenerateBenchRow>& rows) {
  if (rows.empty()) return nullptr;
  return FindRow(rows, [&](const GenerateBenchRow& x) {
    return x.model == r.model && x.engine == r.engine &&
           x.cache == rows.front().cache;
  });
}

// Same-round ratios, where there are rounds: the figures that judge "no
// slower than its source" and "faster with a smaller cache" on a shared
// machine, where one engine's block of steps can meet a slower minute than
// another's.
void PrintRoundRatios(const std::vector<GenerateBenchRow>& rows) {
  auto print = [&](const char* title, auto reference_of) {
    bool header = false;
    for (const auto& r : rows) {
      const auto ratios = RoundRatios(r, reference_of(r, rows));
      if (ratios.size() < 2) continue;
      if (!header) {
        std::printf(
            "\nmedian step over %s, round by round (below 1 is "
            "faster)\n",
            title);
        header = true;
      }
      std::printf("  %-10s %-12s %-5s", r.model.c_str(), r.engine.c_str(),
                  r.cache.c_str());
      for (double x : ratios) std::printf(" %.3f", x);
      std::printf("   median %.3f\n", Median(ratios));
    }
  };
  print("the source's with the same cache", SourceRowFor);
  if (!rows.empty()) {
    print(("the same engine's with a " + rows.front().cache + " cache").c_str(),
          FirstCacheRowFor);
  }
}

// The storages' names ("bf16,q8").
std::string CacheNames(const GenerateBenchOptions& o) {
  return absl::StrJoin(kernels::NamesOf(o.cache_dtypes), ",");
}

int RunGenerate(GenerateBenchOptions o, const GenerateArgs& a) {
  o.checkpoint = a.checkpoint;
  o.source = a.source;
  o.bf16_products = a.products == "bf16";
  const std::string& against_llama_cpp = a.against_llama_cpp;
  const std::string& llama_cpp_source = a.llama_cpp_source;
  StageProgress progress("bench generate");
  o.on_progress = progress.Sink();
  auto rows = RunGenerateBench(o);
  progress.Finish();
  if (!rows.ok()) return Fail(rows.status());
  std::optional<GenerateBenchRow> llama_source;
  if (!llama_cpp_source.empty()) {
    auto row = RunLlamaCpp(llama_cpp_source, o, "source gguf");
    if (!row.ok()) return Fail(row.status());
    llama_source = *row;
  }
  if (!against_llama_cpp.empty()) {
    auto row = RunLlamaCpp(against_llama_cpp, o, "gguf");
    if (!row.ok()) return Fail(row.status());
    rows->push_back(*row);
  }
  if (Globals().json) {
    nlohmann::json j = {{"context", o.context},
                        {"tokens", o.tokens},
                        {"rounds", o.rounds},
                        {"cache_dtypes", CacheNames(o)},
                        {"threads", ThreadCount()},
                        {"provenance", BuildProvenance()},
                        {"rows", nlohmann::json::array()}};
    for (const auto& r : *rows) {
      nlohmann::json row = {
          {"model", r.model},
          {"engine", r.engine},
          {"cache", r.cache},
          {"cache_layout", r.cache_layout},
          {"context", r.context},
          {"prefill_seconds", r.prefill_seconds},
          {"prefill_tokens_per_second", r.prefill_tokens_per_second},
          {"decode_tokens", r.tokens},
          {"decode_tokens_per_second", r.tokens_per_second},
          {"step_ms_median", r.step_ms_median},
          {"step_ms_min", r.step_ms_min},
          {"step_ms_max", r.step_ms_max},
          {"round_step_ms_median", r.round_step_ms_median},
          {"cache_bytes", r.cache_bytes}};
      if (const auto ratios = RoundRatios(r, SourceRowFor(r, *rows));
          !ratios.empty()) {
        row["round_step_ratio_to_source"] = ratios;
        row["median_round_step_ratio_to_source"] = Median(ratios);
      }
      if (const auto ratios = RoundRatios(r, FirstCacheRowFor(r, *rows));
          !ratios.empty()) {
        row["round_step_ratio_to_first_cache"] = ratios;
        row["median_round_step_ratio_to_first_cache"] = Median(ratios);
      }
      if (!against_llama_cpp.empty() && r.model != "llama.cpp") {
        const GenerateBenchRow& ref = rows->back();
        row["decode_speedup_vs_llama_cpp"] = ref.step_ms_median / r.step_ms_median;
        row["prefill_speedup_vs_llama_cpp"] =
            r.prefill_tokens_per_second / ref.prefill_tokens_per_second;
      }
      j["rows"].push_back(row);
    }
    if (llama_source) {
      const GenerateBenchRow& ref = rows->back();
      j["llama_cpp_source"] = {
          {"step_ms_median", llama_source->step_ms_median},
          {"prefill_tokens_per_second",
           llama_source->prefill_tokens_per_second},
          {"decode_step_ratio_to_source",
           ref.step_ms_median / llama_source->step_ms_median}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf(
      "context %lld filled by one prefill, then %lld timed decode steps, %s "
      "cache, %d "
      "threads",
      static_cast<long long>(o.context), static_cast<long long>(o.tokens),
      CacheNames(o).c_str(), ThreadCount());
  if (o.rounds > 1) {
    std::printf(
        "; %lld rounds (each engine prefilled and timed once a round, in turn; "
        "a row pools its rounds)",
        static_cast<long long>(o.rounds));
  }
  std::printf("\n\n");
  std::printf("%-10s %-12s %-5s %-6s %11s %11s %10s %10s %10s %14s\n", "model",
              "engine", "cache", "layout", "prefill t/s", "decode t/s",
              "median ms", "min ms", "max ms", "cache bytes");
  for (const auto& r : *rows) {
    std::printf(
        "%-10s %-12s %-5s %-6s %11.1f %11.2f %10.2f %10.2f %10.2f %14lld\n",
        r.model.c_str(), r.engine.c_str(), r.cache.c_str(),
        r.cache_layout.c_str(), r.prefill_tokens_per_second,
        r.tokens_per_second, r.step_ms_median, r.step_ms_min, r.step_ms_max,
        static_cast<long long>(r.cache_bytes));
  }
  PrintRoundRatios(*rows);
  if (!against_llama_cpp.empty()) {
    const GenerateBenchRow& ref = rows->back();
    std::printf("\nagainst llama.cpp (same run, %d threads): decode by median step, prefill "
                "by tokens/s; above 1 is faster than llama.cpp\n",
                ThreadCount());
    for (size_t i = 0; i + 1 < rows->size(); ++i) {
      const GenerateBenchRow& r = (*rows)[i];
      std::printf("  %-10s %-12s decode %.2fx  prefill %.2fx\n", r.model.c_str(),
                  r.engine.c_str(), ref.step_ms_median / r.step_ms_median,
                  r.prefill_tokens_per_second / ref.prefill_tokens_per_second);
    }
    if (llama_source) PrintLlamaCppSourceRatio(ref, *llama_source);
  }
  return kExitOk;
}

}  // namespace

void AddBenchCommands(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.get_subcommand("bench");
  auto* cmd = bench->add_subcommand(
      "decode",
      "Decode-step time of MHA, GQA, MLA and LRKV kernels at equal cache");
  const DecodeBenchFlags flags = AddDecodeBenchOptions(cmd);
  auto checkpoint = AddSchemaFlags(cmd, DecodeCheckpointSchema());
  auto remote = RemoteJob::Attach(cmd, {"bench", flags.bench});
  cmd->callback([flags, checkpoint, remote, exit_code] {
    auto args = ParseDecodeBenchFlags(flags);
    auto ckpt = ParseFlags(*checkpoint, DecodeCheckpointSchema(), {});
    if (!args.ok() || !ckpt.ok()) {
      *exit_code = Fail(args.ok() ? ckpt.status() : args.status());
      return;
    }
    *exit_code = remote->Requested() ? remote->Run()
                                     : RunDecode(*args, ckpt->checkpoint);
  });

  auto* gen = bench->add_subcommand(
      "generate",
      "End-to-end decode tokens/s at long context, converted vs source");
  auto timing = AddSchemaFlags(gen, GenerateBenchOptionSchema());
  auto own = AddSchemaFlags(gen, GenerateArgsSchema());
  RefuseRenamedOption(gen, "--dtype", kCacheDtypeHint);
  gen->callback([timing, own, exit_code] {
    auto o = ParseFlags(*timing, GenerateBenchOptionSchema(), {});
    auto a = ParseFlags(*own, GenerateArgsSchema(), {});
    if (!o.ok() || !a.ok()) {
      *exit_code = Fail(o.ok() ? a.status() : o.status());
      return;
    }
    *exit_code = RunGenerate(*std::move(o), *a);
  });
}

}  // namespace lrkv::cli
