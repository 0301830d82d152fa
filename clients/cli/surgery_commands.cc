// `lrkv cache` (accounting of every variant's KV cache) and `lrkv convert` (K/V
// surgery of a checkpoint into LRKV, GQA, MQA or MLA).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "clients/cli/commands.h"
#include "clients/cli/job_command.h"
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
  AttentionShape shape = [] {
    AttentionShape s;
    s.layers = 0;  // given, or from --checkpoint
    return s;
  }();
  CacheQuery query;
  std::string dtype = "bf16";
};

// convert's options: the schema's flags, and the command's own checkpoint and output.
struct ConvertArgs {
  std::shared_ptr<SchemaFlags> flags, own;
};

const OptionSchema<JobCommandArgs>& ConvertCommandSchema() {
  static const auto schema =
      JobCommandSchema("convert", "Source checkpoint", {"out"});
  return schema;
}

// cache's options: the shape (or a checkpoint to take it from) and what to
// compare.
const OptionSchema<CacheArgs>& CacheSchema() {
  using A = CacheArgs;
  static const OptionSchema<A> schema = [] {
    OptionSchema<A> s("cache");
    s.Value(
         "checkpoint", [](A & a) -> auto& { return a.checkpoint; },
         "Take the shape from this model (QK-norm included: the sizes convert "
         "plans for it) instead of --layers, --heads, ...")
        .Path();
    s.Value(
         "layers", [](A & a) -> auto& { return a.shape.layers; }, "Layers N")
        .Min(0);
    s.Value(
         "heads", [](A & a) -> auto& { return a.shape.heads; }, "Query heads H")
        .Min(0);
    s.Value(
         "source_kv_heads", [](A & a) -> auto& { return a.shape.kv_heads; },
         "Source KV heads (0: H, MHA)")
        .Min(0);
    s.Value(
         "head_dim", [](A & a) -> auto& { return a.shape.head_dim; },
         "Head dim d_h")
        .Min(0);
    s.Value(
         "hidden", [](A & a) -> auto& { return a.shape.hidden; },
         "Model width d (0: H*d_h)")
        .Min(0);
    s.Value(
        "qk_norm", [](A & a) -> auto& { return a.shape.qk_norm; },
        "LRKV caches one QK-norm scale per KV head");
    s.Value(
         "rank", [](A & a) -> auto& { return a.query.rank; },
         "LRKV rank r (MLA matched)")
        .Min(0);
    s.Value(
         "latent", [](A & a) -> auto& { return a.query.latent; },
         "MLA latent d_c (LRKV matched)")
        .Min(0);
    s.Value(
         "budget", [](A & a) -> auto& { return a.query.budget; },
         "Fraction of the source cache: every variant's largest config "
         "within it")
        .Above(0, 1);
    s.Value(
         "context", [](A & a) -> auto& { return a.query.context; }, "Tokens L")
        .Min(1);
    s.Value(
         "batch", [](A & a) -> auto& { return a.query.batch; }, "Batch b")
        .Min(1);
    s.Value(
         "dtype", [](A & a) -> auto& { return a.dtype; },
         "Cache element: bf16 | fp16 | fp32 | fp8")
        .Choices({"bf16", "fp16", "fp32", "fp8"});
    s.Check([](const A& a, OptionSource) -> absl::Status {
      if ((a.query.rank >= 0) + (a.query.latent >= 0) + (a.query.budget > 0) >
          1) {
        return absl::InvalidArgumentError(
            "--rank, --latent and --budget each choose the sizes compared; "
            "give one");
      }
      return absl::OkStatus();
    });
    return s;
  }();
  return schema;
}

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
  } else {
    a.query.bytes_per_element = 1;  // fp8
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

int RunConvert(const ConvertArgs& v) {
  auto own = ParseFlags(*v.own, ConvertCommandSchema(), {});
  if (!own.ok()) return Fail(own.status());
  if (own->out.empty())
    return Fail(absl::InvalidArgumentError("--out is required"));
  ConvertJobOptions base;
  base.checkpoint = own->checkpoint;
  base.out_dir = own->out;
  auto job = ParseFlags(*v.flags, ConvertOptionSchema(), std::move(base));
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
};

const OptionSchema<BenchConvertArgs>& BenchConvertSchema() {
  using A = BenchConvertArgs;
  static const OptionSchema<A> schema = [] {
    OptionSchema<A> s("bench convert");
    s.Value(
         "layers", [](A & a) -> auto& { return a.bench.layers; }, "Layers")
        .Range(1, 1024);
    s.Value(
         "hidden", [](A & a) -> auto& { return a.bench.hidden; },
         "Model width d")
        .Range(1, 1 << 20);
    s.Value(
         "heads", [](A & a) -> auto& { return a.bench.heads; }, "Query heads H")
        .Range(1, 4096);
    s.Value(
         "source_kv_heads", [](A & a) -> auto& { return a.bench.kv_heads; },
         "Source KV heads H_kv (0: H, MHA)")
        .Range(0, 4096);
    s.Value(
         "head_dim", [](A & a) -> auto& { return a.bench.head_dim; },
         "Head dim d_h")
        .Range(1, 4096);
    s.Choice(
        "variant", [](A & a) -> auto& { return a.bench.conversion.variant; },
        {KvVariant::kLrkv, KvVariant::kGqa, KvVariant::kMqa, KvVariant::kMla},
        KvVariantName, "Target: lrkv | gqa | mqa | mla");
    s.Value(
         "rank", [](A & a) -> auto& { return a.bench.conversion.rank; },
         "LRKV rank r")
        .Min(0);
    s.Value(
         "kv_heads", [](A & a) -> auto& { return a.bench.conversion.kv_heads; },
         "GQA KV heads (the target's, as convert's --kv-heads)")
        .Min(0);
    s.Value(
         "latent", [](A & a) -> auto& { return a.bench.conversion.latent; },
         "MLA latent d_c")
        .Min(0);
    s.Value(
         "budget", [](A & a) -> auto& { return a.bench.conversion.budget; },
         "Cache budget as a fraction of the source cache (instead of --rank, "
         "--kv-heads or --latent)")
        .Above(0, 1);
    s.Choice(
        "rope_mode",
        [](A & a) -> auto& { return a.bench.conversion.rope_mode; },
        {RopeMode::kReconstruct, RopeMode::kPlane, RopeMode::kPartial,
         RopeMode::kSharedPlane},
        RopeModeName, "reconstruct | plane | partial | shared-plane");
    s.Value(
         "iters", [](A & a) -> auto& { return a.bench.conversion.max_iters; },
         "LRKV: alternating iterations at most")
        .Min(1);
    s.Value(
         "tol", [](A & a) -> auto& { return a.bench.conversion.tol; },
         "Relative stopping tolerance")
        .Min(0);
    s.Value(
        "seed", [](A & a) -> auto& { return a.bench.seed; }, "Random seed");
    return s;
  }();
  return schema;
}

int RunBenchConvert(BenchConvertArgs a) {
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
  auto* cache = app.add_subcommand(
      "cache",
      "KV-cache size of MHA, GQA, MQA, MLA and LRKV for an attention shape");
  AddSchemaCommand(cache, CacheSchema(), exit_code, RunCache);
  RefuseRenamedOption(cache, "--kv-heads", kSourceKvHeadsHint);

  auto v = std::make_shared<ConvertArgs>();
  auto* conv = app.add_subcommand(
      "convert",
      "Convert a checkpoint's K/V projections to LRKV, GQA, MQA or MLA");
  v->own = AddSchemaFlags(conv, ConvertCommandSchema());
  v->flags = AddSchemaFlags(conv, ConvertOptionSchema());
  auto remote = RemoteJob::Attach(conv, {"convert", v->flags});
  conv->callback([v, remote, exit_code] {
    *exit_code = remote->Requested() ? remote->Run() : RunConvert(*v);
  });

  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* bconv = bench->add_subcommand(
      "convert",
      "Time the K/V surgery of a random model of a given attention shape");
  AddSchemaCommand(bconv, BenchConvertSchema(), exit_code, RunBenchConvert);
  RefuseRenamedOption(bconv, "--kv-heads-target",
                      "renamed --kv-heads (the GQA target, as `lrkv convert "
                      "--kv-heads`); the source's is --source-kv-heads");
}

}  // namespace lrkv::cli
