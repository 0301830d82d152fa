// End-to-end decode throughput at long context (see generate_bench.h).
#include "runtime/generate_bench.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
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

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One engine whose cache holds the context, with the token it decodes next and
// the times of its steps.
struct Contender {
  std::unique_ptr<DecodeEngine> engine;
  at::Tensor next;
  std::string name;
  std::vector<double> step_ms;
  GenerateBenchRow row;
};

// A `mode` engine of model (c, w) with its cache filled by one prefill of a
// fixed token pattern.
absl::StatusOr<Contender> Prefilled(const ModelConfig& c, const LlamaWeights& w,
                                    DecodeMode mode,
                                    const GenerateBenchOptions& o,
                                    const std::string& model,
                                    BenchProgress& progress) {
  Contender e;
  e.name = absl::StrCat(model, " ", DecodeModeName(mode));
  EngineOptions eo;
  eo.capacity = o.context + o.tokens;
  eo.cache_dtype = o.dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  eo.factored_layout = o.cache_layout == "rows"    ? FactoredCacheLayout::kRows
                       : o.cache_layout == "tiles" ? FactoredCacheLayout::kTiles
                                                   : FactoredCacheLayout::kAuto;
  ASSIGN_OR_RETURN(e.engine, CreateDecodeEngine(c, w, mode, eo));
  at::NoGradGuard no_grad;
  std::vector<int64_t> pattern(o.context);
  for (int64_t t = 0; t < o.context; ++t) pattern[t] = 1 + (t * 7919) % (c.vocab_size - 1);
  progress.Tell(absl::StrCat(e.name, ": prefill of ", o.context, " tokens"));
  const auto p0 = Clock::now();
  {
    const Bf16ProductsScope bf16(o.bf16_products);
    e.next = e.engine->Prefill(at::tensor(pattern, at::kLong)).argmax(-1);
  }
  e.row.prefill_seconds = SecondsSince(p0);
  e.row.prefill_tokens_per_second = o.context / e.row.prefill_seconds;
  e.row.model = model;
  e.row.engine = DecodeModeName(mode);
  e.row.context = o.context;
  e.row.cache_layout = e.engine->cache_layout();
  return e;
}

// Times o.tokens greedy steps of every engine, interleaved: round i steps each
// engine once, so that the machine's drift (this one is shared, and its speed
// moved by 10-20 % within minutes) falls on all of them alike instead of on
// whichever ran last.
void TimeSteps(const GenerateBenchOptions& o, BenchProgress& progress,
               std::vector<Contender>* all) {
  at::NoGradGuard no_grad;
  progress.Tell(absl::StrCat(
      o.tokens, " timed decode steps of each engine, interleaved"));
  auto told = Clock::now();
  for (int64_t i = 0; i < o.tokens; ++i) {
    if (SecondsSince(told) > 10) {
      progress.Tell(absl::StrCat("timed step ", i + 1, " of ", o.tokens),
                    false);
      told = Clock::now();
    }
    for (Contender& e : *all) {
      const auto s0 = Clock::now();
      e.next = e.engine->Step(e.next).argmax(-1);
      e.step_ms.push_back(SecondsSince(s0) * 1e3);
    }
  }
  for (Contender& e : *all) {
    SetDecodeSteps(std::move(e.step_ms), &e.row);
    e.row.cache_bytes = e.engine->MeasureCache().used_bytes;
  }
}

absl::StatusOr<std::vector<GenerateBenchRow>> Run(const GenerateBenchOptions& o) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt, Checkpoint::Open(o.checkpoint));
  RETURN_IF_ERROR(ValidateGenerateBenchOptions(o, ckpt->config()));
  ASSIGN_OR_RETURN(DecodeMode mode,
                   ParseDecodeMode(o.mode == "auto" ? RopeModeName(ckpt->config().kv.rope_mode)
                                                    : o.mode));
  const bool factored = ckpt->config().kv.layout != KvLayout::kDense &&
                        mode != DecodeMode::kExpanded;
  const int64_t engines = 1 + (factored ? 1 : 0) + (o.source.empty() ? 0 : 1);
  BenchProgress progress{o, 0, 2 + engines};
  progress.Tell("loading the weights");
  ASSIGN_OR_RETURN(LlamaWeights w, LoadLlamaWeights(ckpt, StoredDtype()));
  // Every engine is prefilled (and held) before any is timed.
  std::vector<Contender> all;
  ASSIGN_OR_RETURN(Contender expanded,
                   Prefilled(ckpt->config(), w, DecodeMode::kExpanded, o,
                             "converted", progress));
  all.push_back(std::move(expanded));
  if (factored) {
    ASSIGN_OR_RETURN(Contender e, Prefilled(ckpt->config(), w, mode, o,
                                            "converted", progress));
    all.push_back(std::move(e));
  }
  std::shared_ptr<const Checkpoint> src;
  LlamaWeights sw;
  if (!o.source.empty()) {
    ASSIGN_OR_RETURN(src, Checkpoint::Open(o.source));
    ASSIGN_OR_RETURN(sw, LoadLlamaWeights(src, StoredDtype()));
    ASSIGN_OR_RETURN(Contender e,
                     Prefilled(src->config(), sw, DecodeMode::kExpanded, o,
                               "source", progress));
    all.push_back(std::move(e));
  }
  TimeSteps(o, progress, &all);
  std::vector<GenerateBenchRow> rows;
  for (const Contender& e : all) rows.push_back(e.row);
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
