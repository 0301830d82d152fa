// End-to-end decode throughput at long context (see generate_bench.h).
#include "runtime/generate_bench.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/median.h"
#include "base/status_macros.h"
#include "model/checkpoint.h"
#include "runtime/decode_engine.h"
#include "runtime/llama_weights.h"
#include "runtime/stored_linear.h"

namespace lrkv {

absl::Status ValidateGenerateBenchOptions(const GenerateBenchOptions& o,
                                          const ModelConfig& config) {
  if (o.context < 1 || o.context > (1 << 20) || o.tokens < 1 || o.tokens > 100000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--context must lie in [1, 1048576] and --tokens in [1, 100000] (got ", o.context,
        ", ", o.tokens, ")"));
  }
  if (o.dtype != "bf16" && o.dtype != "fp32") {
    return absl::InvalidArgumentError("--dtype must be bf16 or fp32");
  }
  if (o.cache_layout != "auto" && o.cache_layout != "rows" && o.cache_layout != "tiles") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cache-layout must be auto, rows or tiles (got '", o.cache_layout, "')"));
  }
  if (o.mode != "auto") RETURN_IF_ERROR(ParseDecodeMode(o.mode).status());
  // The decode engines attend to their whole cache: past a sliding window they would
  // time (and compute) another model than the checkpoint's.
  if (const int64_t w = config.sliding_window; w > 0 && o.context + o.tokens > w) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--context + --tokens = ", o.context + o.tokens, " exceeds the model's sliding_window "
        "of ", w, "; the decode engines attend to the whole cache"));
  }
  return absl::OkStatus();
}

namespace {

// Stage lines for the bench's progress: each engine's prefill and steps, numbered.
struct BenchProgress {
  const GenerateBenchOptions& o;
  int64_t stage = 0, stages = 1;
  void Tell(const std::string& what, bool next = true) {
    if (next) ++stage;
    if (o.on_progress) o.on_progress(what, stage, stages);
  }
};

absl::StatusOr<GenerateBenchRow> Time(const ModelConfig& c, const LlamaWeights& w,
                                      DecodeMode mode, const GenerateBenchOptions& o,
                                      const std::string& model, BenchProgress& progress) {
  const std::string name = absl::StrCat(model, " ", DecodeModeName(mode));
  EngineOptions eo;
  eo.capacity = o.context + o.tokens;
  eo.cache_dtype = o.dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  eo.factored_layout = o.cache_layout == "rows"    ? FactoredCacheLayout::kRows
                       : o.cache_layout == "tiles" ? FactoredCacheLayout::kTiles
                                                   : FactoredCacheLayout::kAuto;
  ASSIGN_OR_RETURN(auto engine, CreateDecodeEngine(c, w, mode, eo));
  at::NoGradGuard no_grad;
  // Fill the cache with a fixed token pattern in one prefill, then time greedy steps.
  std::vector<int64_t> pattern(o.context);
  for (int64_t t = 0; t < o.context; ++t) pattern[t] = 1 + (t * 7919) % (c.vocab_size - 1);
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  GenerateBenchRow row;
  progress.Tell(absl::StrCat(name, ": prefill of ", o.context, " tokens"));
  const auto p0 = Clock::now();
  at::Tensor next;
  {
    const Bf16ProductsScope bf16(o.bf16_products);
    next = engine->Prefill(at::tensor(pattern, at::kLong)).argmax(-1);
  }
  row.prefill_seconds = seconds_since(p0);
  row.prefill_tokens_per_second = o.context / row.prefill_seconds;
  std::vector<double> steps;
  progress.Tell(absl::StrCat(name, ": ", o.tokens, " timed decode steps"));
  auto told = Clock::now();
  for (int64_t i = 0; i < o.tokens; ++i) {
    if (seconds_since(told) > 10) {
      progress.Tell(absl::StrCat(name, ": timed step ", i + 1, " of ", o.tokens), false);
      told = Clock::now();
    }
    const auto s0 = Clock::now();
    next = engine->Step(next).argmax(-1);
    steps.push_back(seconds_since(s0) * 1e3);
  }
  SetDecodeSteps(std::move(steps), &row);
  row.model = model;
  row.engine = DecodeModeName(mode);
  row.context = o.context;
  row.cache_bytes = engine->MeasureCache().used_bytes;
  row.cache_layout = engine->cache_layout();
  return row;
}

absl::StatusOr<std::vector<GenerateBenchRow>> Run(const GenerateBenchOptions& o) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt, Checkpoint::Open(o.checkpoint));
  RETURN_IF_ERROR(ValidateGenerateBenchOptions(o, ckpt->config()));
  ASSIGN_OR_RETURN(DecodeMode mode,
                   ParseDecodeMode(o.mode == "auto" ? RopeModeName(ckpt->config().kv.rope_mode)
                                                    : o.mode));
  const bool factored = ckpt->config().kv.layout != KvLayout::kDense &&
                        mode != DecodeMode::kExpanded;
  BenchProgress progress{o, 0, 1 + 2 * (1 + (factored ? 1 : 0) + (o.source.empty() ? 0 : 1))};
  progress.Tell("loading the weights");
  ASSIGN_OR_RETURN(LlamaWeights w, LoadLlamaWeights(ckpt, StoredDtype()));
  std::vector<GenerateBenchRow> rows;
  ASSIGN_OR_RETURN(auto expanded,
                   Time(ckpt->config(), w, DecodeMode::kExpanded, o, "converted", progress));
  rows.push_back(expanded);
  if (factored) {
    ASSIGN_OR_RETURN(auto row, Time(ckpt->config(), w, mode, o, "converted", progress));
    rows.push_back(row);
  }
  if (!o.source.empty()) {
    ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> src, Checkpoint::Open(o.source));
    ASSIGN_OR_RETURN(LlamaWeights sw, LoadLlamaWeights(src, StoredDtype()));
    ASSIGN_OR_RETURN(auto row,
                     Time(src->config(), sw, DecodeMode::kExpanded, o, "source", progress));
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

void SetDecodeSteps(std::vector<double> step_ms, GenerateBenchRow* row) {
  row->tokens = static_cast<int64_t>(step_ms.size());
  row->seconds = 0;
  for (double ms : step_ms) row->seconds += ms / 1e3;
  row->tokens_per_second = row->tokens / row->seconds;
  const auto [min, max] = std::minmax_element(step_ms.begin(), step_ms.end());
  row->step_ms_min = *min;
  row->step_ms_max = *max;
  row->step_ms_median = Median(std::move(step_ms));
}

absl::StatusOr<std::vector<GenerateBenchRow>> RunGenerateBench(const GenerateBenchOptions& o) {
  try {
    return Run(o);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("bench generate: ", e.what_without_backtrace()));
  }
}

}  // namespace lrkv
