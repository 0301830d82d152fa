// `lrkv bench decode`: decode-step kernels of MHA, budget-matched GQA and MLA,
// and LRKV, timed interleaved in one run with bytes moved and achieved
// bandwidth.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "clients/cli/commands.h"
#include "clients/cli/remote.h"
#include "kernels/decode_bench.h"
#include "model/checkpoint.h"
#include "verify/generate_bench.h"

namespace lrkv::cli {
namespace {

struct DecodeArgs {
  kernels::DecodeBenchOptions bench;
  std::string contexts = "512,2048,8192,32768";
  std::string dtype = "bf16";
  std::string json_path;
  std::string checkpoint;
};

int RunDecode(DecodeArgs a) {
  if (!a.checkpoint.empty()) {
    auto ckpt = Checkpoint::Open(a.checkpoint);
    if (!ckpt.ok()) return Fail(ckpt.status());
    a.bench.heads = (*ckpt)->config().num_heads;
    a.bench.kv_heads = (*ckpt)->config().num_kv_heads;
    a.bench.head_dim = (*ckpt)->config().head_dim;
  }
  a.bench.contexts.clear();
  for (absl::string_view part : absl::StrSplit(a.contexts, ',')) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--context '", a.contexts, "' must be comma-separated integers")));
    }
    a.bench.contexts.push_back(v);
  }
  if (a.dtype == "bf16") {
    a.bench.dtype = kernels::CacheDType::kBF16;
  } else if (a.dtype == "fp32") {
    a.bench.dtype = kernels::CacheDType::kF32;
  } else {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--dtype '", a.dtype, "' must be bf16 or fp32")));
  }
  auto report = kernels::RunDecodeBench(a.bench);
  if (!report.ok()) return Fail(report.status());
  std::cout << report->ToTable();
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    out << report->ToJson() << "\n";
    if (!out)
      return Fail(absl::PermissionDeniedError(
          absl::StrCat(a.json_path, ": cannot write")));
  }
  return kExitOk;
}

int RunGenerate(const GenerateBenchOptions& o) {
  auto rows = RunGenerateBench(o);
  if (!rows.ok()) return Fail(rows.status());
  std::printf(
      "decode throughput at context %lld, %lld timed tokens, %s cache\n\n",
      static_cast<long long>(o.context), static_cast<long long>(o.tokens),
      o.dtype.c_str());
  std::printf("%-10s %-12s %-6s %12s %10s %14s\n", "model", "engine", "cache",
              "tokens/s", "ms/token", "cache bytes");
  for (const auto& r : *rows) {
    std::printf("%-10s %-12s %-6s %12.1f %10.3f %14lld\n", r.model.c_str(),
                r.engine.c_str(), r.cache_layout.c_str(), r.tokens_per_second,
                1000.0 / r.tokens_per_second,
                static_cast<long long>(r.cache_bytes));
  }
  return kExitOk;
}

}  // namespace

void AddBenchCommands(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.get_subcommand("bench");
  auto d = std::make_shared<DecodeArgs>();
  auto* cmd = bench->add_subcommand(
      "decode",
      "Decode-step time of MHA, GQA, MLA and LRKV kernels at equal cache");
  cmd->add_option("--heads", d->bench.heads, "Query heads H");
  cmd->add_option("--kv-heads", d->bench.kv_heads,
                  "Source KV heads (default H)");
  cmd->add_option("--head-dim", d->bench.head_dim, "Head dim d_h");
  cmd->add_option("--rank", d->bench.rank, "LRKV rank r");
  cmd->add_option("--batch", d->bench.batch, "Sequences decoded together");
  cmd->add_option("--context", d->contexts, "Context lengths, comma-separated");
  cmd->add_option("--dtype", d->dtype, "Cache storage: bf16 | fp32");
  cmd->add_option("--threads", d->bench.threads,
                  "OpenMP threads (default: all CPUs)");
  cmd->add_option("--iters", d->bench.iterations,
                  "Timed steps per variant and context");
  cmd->add_option("--json", d->json_path, "Write the results as JSON");
  cmd->add_option(
      "--checkpoint", d->checkpoint,
      "Take H, H_kv and d_h from this checkpoint (needed with --server)");
  RemoteSpec spec;
  spec.kind = "bench";
  spec.skip = {"heads", "kv-heads", "head-dim"};
  spec.rename = {{"iters", "iterations"}};
  spec.lists = {"context"};
  auto remote = RemoteJob::Attach(cmd, spec);
  cmd->callback([d, remote, exit_code] {
    *exit_code = remote->Requested() ? remote->Run() : RunDecode(*d);
  });

  auto g = std::make_shared<GenerateBenchOptions>();
  auto* gen = bench->add_subcommand(
      "generate",
      "End-to-end decode tokens/s at long context, converted vs source");
  gen->add_option("--checkpoint", g->checkpoint,
                  "Checkpoint (usually converted)")
      ->required();
  gen->add_option("--source", g->source, "The source model, timed beside it");
  gen->add_option("--mode", g->mode,
                  "Factored decode mode: plane | reconstruct | partial");
  gen->add_option("--context", g->context, "Tokens in the cache before timing");
  gen->add_option("--tokens", g->tokens, "Timed decode steps");
  gen->add_option("--dtype", g->dtype, "Cache storage: bf16 | fp32");
  gen->add_option("--cache-layout", g->cache_layout,
                  "Plane mode's factored cache: auto (tiles where the fused "
                  "kernel runs) | rows | tiles");
  gen->callback([g, exit_code] { *exit_code = RunGenerate(*g); });
}

}  // namespace lrkv::cli
