// `lrkv cache` (accounting of every variant's KV cache) and `lrkv convert` (K/V
// surgery of a checkpoint into LRKV, GQA, MQA or MLA).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "clients/cli/commands.h"
#include "clients/cli/remote.h"
#include "clients/cli/renamed_options.h"
#include "clients/cli/schema_flags.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "surgery/cache_accounting.h"
#include "surgery/conversion_options.h"
#include "surgery/convert_job.h"
#include "surgery/convert_options_schema.h"

namespace lrkv::cli {
namespace {

struct CacheArgs {
  std::string checkpoint;  // the shape from this model (QK-norm included), as convert reads it
  AttentionShape shape;
  CacheQuery query;
  std::string dtype = "bf16";
};

// convert's options: the schema's flags, and the command's own checkpoint and output.
struct ConvertArgs {
  std::string checkpoint, out_dir;
  std::shared_ptr<SchemaFlags> flags;
};

int RunCache(CacheArgs a) {
  if (!a.checkpoint.empty()) {
    auto ckpt = Checkpoint::Open(a.checkpoint);
    if (!ckpt.ok()) return Fail(ckpt.status());
    a.shape = ShapeOf((*ckpt)->config());
  } else if (a.shape.layers <= 0 || a.shape.heads <= 0 || a.shape.head_dim <= 0) {
    return UsageError("give --checkpoint, or the shape: --layers, --heads and --head-dim");
  }
  if (a.dtype == "bf16" || a.dtype == "fp16") {
    a.query.bytes_per_element = 2;
  } else if (a.dtype == "fp32") {
    a.query.bytes_per_element = 4;
  } else if (a.dtype == "fp8") {
    a.query.bytes_per_element = 1;
  } else {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--dtype '", a.dtype, "' is not one of bf16, fp16, fp32, fp8")));
  }
  auto rows = CompareCacheFootprints(a.shape, a.query);
  if (!rows.ok()) return Fail(rows.status());
  if (Globals().json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : *rows) {
      j.push_back({{"variant", KvVariantName(r.config.variant)},
                   {"config", r.config.ToString()},
                   {"elements_per_token_layer", r.elements_per_token_layer},
                   {"bytes", r.bytes},
                   {"mib", r.bytes / (1 << 20)},
                   {"ratio_to_source", r.ratio_to_source},
                   {"ratio_to_mha", r.ratio_to_mha},
                   {"kv_params_per_layer", r.kv_params_per_layer}});
    }
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::printf(
      "layers %lld, heads %lld, kv heads %lld, head dim %lld, context %lld, "
      "batch %lld, %s (%lld bytes/element)\n",
      static_cast<long long>(a.shape.layers),
      static_cast<long long>(a.shape.heads),
      static_cast<long long>(a.shape.source_kv_heads()),
      static_cast<long long>(a.shape.head_dim),
      static_cast<long long>(a.query.context),
      static_cast<long long>(a.query.batch), a.dtype.c_str(),
      static_cast<long long>(a.query.bytes_per_element));
  std::printf("%-8s %-18s %14s %12s %10s %10s %16s\n", "variant", "config",
              "elem/tok/layer", "MiB", "vs source", "vs MHA",
              "K/V params/layer");
  for (const auto& r : *rows) {
    std::printf("%-8s %-18s %14lld %12.2f %9.2f%% %9.2f%% %16lld\n",
                KvVariantName(r.config.variant), r.config.ToString().c_str(),
                static_cast<long long>(r.elements_per_token_layer),
                r.bytes / (1 << 20), 100 * r.ratio_to_source,
                100 * r.ratio_to_mha,
                static_cast<long long>(r.kv_params_per_layer));
  }
  return kExitOk;
}

int RunConvert(const ConvertArgs& a) {
  if (a.out_dir.empty()) return Fail(absl::InvalidArgumentError("--out is required"));
  ConvertJobOptions base;
  base.checkpoint = a.checkpoint;
  base.out_dir = a.out_dir;
  auto job = ParseFlags(*a.flags, ConvertOptionSchema(), std::move(base));
  if (!job.ok()) return Fail(job.status());
  StageProgress progress("convert");
  job->on_progress = progress.Sink();
  job->on_layer = progress.Units();
  job->should_stop = InterruptCheck();
  auto report = RunConvertJob(*job);
  progress.Finish();
  if (!report.ok()) return Fail(report.status());
  if (Globals().json) {
    nlohmann::json j = report->ToJson();
    j["provenance"] = BuildProvenance();
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << report->ToTable() << "\nwritten to " << job->out_dir << "\n";
  }
  return kExitOk;
}

struct BenchConvertArgs {
  ConvertBenchOptions bench;
  std::string variant = "lrkv", rope_mode = "reconstruct";
};

int RunBenchConvert(BenchConvertArgs a) {
  auto variant = ParseKvVariant(a.variant);
  if (!variant.ok()) return Fail(variant.status());
  auto mode = ParseRopeMode(a.rope_mode);
  if (!mode.ok()) return Fail(mode.status());
  a.bench.conversion.variant = *variant;
  a.bench.conversion.rope_mode = *mode;
  auto report = RunConvertBench(a.bench);
  if (!report.ok()) return Fail(report.status());
  if (Globals().json) {
    std::cout << report->ToJson().dump(2) << "\n";
  } else {
    std::printf(
        "%s -> %s, weight metric, %d iterations at most, %d threads\n"
        "wall time %.2f s\n",
        report->source.c_str(), report->target.ToString().c_str(),
        a.bench.conversion.max_iters, report->threads, report->wall_seconds);
  }
  return kExitOk;
}

}  // namespace

void AddSurgeryCommands(CLI::App& app, int* exit_code) {
  auto c = std::make_shared<CacheArgs>();
  auto* cache = app.add_subcommand(
      "cache",
      "KV-cache size of MHA, GQA, MQA, MLA and LRKV for an attention shape");
  c->shape.layers = 0;  // given, or from --checkpoint
  cache->add_option("--checkpoint", c->checkpoint,
                    "Take the shape from this model (QK-norm included: the sizes convert "
                    "plans for it) instead of --layers, --heads, ...");
  cache->add_option("--layers", c->shape.layers, "Layers N");
  cache->add_option("--heads", c->shape.heads, "Query heads H");
  AddSourceKvHeads(cache, &c->shape.kv_heads,
                   "Source KV heads (default H: MHA)");
  cache->add_option("--head-dim", c->shape.head_dim, "Head dim d_h");
  cache->add_option("--hidden", c->shape.hidden,
                    "Model width d (default H*d_h)");
  cache->add_flag("--qk-norm", c->shape.qk_norm,
                  "LRKV caches one QK-norm scale per KV head");
  auto* rank = cache->add_option("--rank", c->query.rank, "LRKV rank r (MLA matched)")
                   ->check(kNotNegative);
  auto* latent = cache->add_option("--latent", c->query.latent, "MLA latent d_c (LRKV matched)")
                     ->check(kNotNegative);
  auto* budget =
      cache->add_option("--budget", c->query.budget,
                        "Fraction of the source cache: every variant's largest "
                        "config within it");
  rank->excludes(latent)->excludes(budget);
  latent->excludes(budget);
  cache->add_option("--context", c->query.context, "Tokens L")
      ->check(CLI::PositiveNumber);
  cache->add_option("--batch", c->query.batch, "Batch b")
      ->check(CLI::PositiveNumber);
  cache->add_option("--dtype", c->dtype, "bf16 | fp16 | fp32 | fp8");
  cache->callback([c, exit_code] { *exit_code = RunCache(*c); });

  auto v = std::make_shared<ConvertArgs>();
  auto* conv = app.add_subcommand(
      "convert",
      "Convert a checkpoint's K/V projections to LRKV, GQA, MQA or MLA");
  conv->add_option("--checkpoint", v->checkpoint, "Source checkpoint")->required();
  v->flags = AddSchemaFlags(conv, ConvertOptionSchema());
  conv->add_option("--out", v->out_dir,
                   "Output folder (must not exist; parents are made); with --server the "
                   "job's checkpoint is downloaded there");
  auto remote = RemoteJob::Attach(conv, {"convert", v->flags});
  conv->callback([v, remote, exit_code] {
    *exit_code = remote->Requested() ? remote->Run() : RunConvert(*v);
  });

  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto b = std::make_shared<BenchConvertArgs>();
  auto* bconv = bench->add_subcommand(
      "convert",
      "Time the K/V surgery of a random model of a given attention shape");
  bconv->add_option("--layers", b->bench.layers, "Layers");
  bconv->add_option("--hidden", b->bench.hidden, "Model width d");
  bconv->add_option("--heads", b->bench.heads, "Query heads H");
  AddSourceKvHeads(bconv, &b->bench.kv_heads, "Source KV heads H_kv");
  bconv->add_option("--head-dim", b->bench.head_dim, "Head dim d_h");
  bconv->add_option("--variant", b->variant, "lrkv | gqa | mqa | mla");
  bconv->add_option("--rank", b->bench.conversion.rank, "LRKV rank r");
  bconv->add_option("--kv-heads-target", b->bench.conversion.kv_heads,
                    "GQA KV heads");
  bconv->add_option("--latent", b->bench.conversion.latent, "MLA latent d_c");
  bconv->add_option("--budget", b->bench.conversion.budget, "Cache budget");
  bconv->add_option("--rope-mode", b->rope_mode,
                    "reconstruct | plane | partial");
  bconv->add_option("--iters", b->bench.conversion.max_iters,
                    "Iterations at most")
      ->capture_default_str();
  bconv->add_option("--tol", b->bench.conversion.tol, "Relative stopping tolerance")
      ->capture_default_str();
  bconv->add_option("--seed", b->bench.seed, "Random seed");
  bconv->callback([b, exit_code] { *exit_code = RunBenchConvert(*b); });
}

}  // namespace lrkv::cli
