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
#include "runtime/cache_dtype.h"
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
  if (o.rounds < 1 || o.rounds > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rounds must lie in [1, 100] (got ", o.rounds, ")"));
  }
  if (o.cache_dtypes.empty()) {
    return absl::InvalidArgumentError("--cache-dtype names no storage");
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

// One engine to time: a model's weights and a decode mode.
struct Contender {
  const ModelConfig* config;
  const LlamaWeights* weights;
  DecodeMode mode;
  std::string model;  // "converted" | "source"
  kernels::CacheDType cache = kernels::CacheDType::kBF16;
};

// One round of one engine: its prefill and its timed steps.
struct Sample {
  double prefill_seconds = 0;
  std::vector<double> step_ms;
  int64_t cache_bytes = 0;
  std::string cache_layout;
};

absl::StatusOr<Sample> Time(const Contender& e, const GenerateBenchOptions& o,
                            const std::string& name, BenchProgress& progress) {
  const ModelConfig& c = *e.config;
  EngineOptions eo;
  eo.capacity = o.context + o.tokens;
  CacheDtypeOf(e.cache).ApplyTo(&eo);
  eo.factored_layout = o.cache_layout == "rows"    ? FactoredCacheLayout::kRows
                       : o.cache_layout == "tiles" ? FactoredCacheLayout::kTiles
                                                   : FactoredCacheLayout::kAuto;
  ASSIGN_OR_RETURN(auto engine, CreateDecodeEngine(c, *e.weights, e.mode, eo));
  at::NoGradGuard no_grad;
  // Fill the cache with a fixed token pattern in one prefill, then time greedy steps.
  std::vector<int64_t> pattern(o.context);
  for (int64_t t = 0; t < o.context; ++t) pattern[t] = 1 + (t * 7919) % (c.vocab_size - 1);
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  Sample sample;
  progress.Tell(absl::StrCat(name, ": prefill of ", o.context, " tokens"));
  const auto p0 = Clock::now();
  at::Tensor next;
  {
    const Bf16ProductsScope bf16(o.bf16_products);
    next = engine->Prefill(at::tensor(pattern, at::kLong)).argmax(-1);
  }
  sample.prefill_seconds = seconds_since(p0);
  progress.Tell(absl::StrCat(name, ": ", o.tokens, " timed decode steps"));
  auto told = Clock::now();
  for (int64_t i = 0; i < o.tokens; ++i) {
    if (seconds_since(told) > 10) {
      progress.Tell(absl::StrCat(name, ": timed step ", i + 1, " of ", o.tokens), false);
      told = Clock::now();
    }
    const auto s0 = Clock::now();
    next = engine->Step(next).argmax(-1);
    sample.step_ms.push_back(seconds_since(s0) * 1e3);
  }
  sample.cache_bytes = engine->MeasureCache().used_bytes;
  sample.cache_layout = engine->cache_layout();
  return sample;
}

// Times every contender o.rounds times, one at a time, forward in even rounds
// and backward in odd ones; a row per contender pools its rounds.
absl::StatusOr<std::vector<GenerateBenchRow>> TimeRounds(
    const std::vector<Contender>& contenders, const GenerateBenchOptions& o,
    BenchProgress& progress) {
  const auto n = static_cast<int64_t>(contenders.size());
  std::vector<std::vector<double>> steps(n);
  std::vector<double> prefill_seconds(n, 0.0);
  std::vector<GenerateBenchRow> rows(n);
  for (int64_t round = 0; round < o.rounds; ++round) {
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = round % 2 == 0 ? k : n - 1 - k;
      const Contender& e = contenders[i];
      std::string name = absl::StrCat(e.model, " ", DecodeModeName(e.mode),
                                      ", ", kernels::CacheDTypeName(e.cache));
      if (o.rounds > 1)
        absl::StrAppend(&name, " (round ", round + 1, " of ", o.rounds, ")");
      ASSIGN_OR_RETURN(Sample s, Time(e, o, name, progress));
      prefill_seconds[i] += s.prefill_seconds;
      rows[i].round_step_ms_median.push_back(Median(s.step_ms));
      steps[i].insert(steps[i].end(), s.step_ms.begin(), s.step_ms.end());
      rows[i].cache_bytes = s.cache_bytes;
      rows[i].cache_layout = s.cache_layout;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    GenerateBenchRow& row = rows[i];
    row.model = contenders[i].model;
    row.engine = DecodeModeName(contenders[i].mode);
    row.cache = kernels::CacheDTypeName(contenders[i].cache);
    row.context = o.context;
    row.prefill_seconds = prefill_seconds[i] / o.rounds;
    row.prefill_tokens_per_second = o.context / row.prefill_seconds;
    SetDecodeSteps(std::move(steps[i]), &row);
  }
  return rows;
}

absl::StatusOr<std::vector<GenerateBenchRow>> Run(const GenerateBenchOptions& o) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt, Checkpoint::Open(o.checkpoint));
  RETURN_IF_ERROR(ValidateGenerateBenchOptions(o, ckpt->config()));
  ASSIGN_OR_RETURN(DecodeMode mode,
                   ParseDecodeMode(o.mode == "auto" ? RopeModeName(ckpt->config().kv.rope_mode)
                                                    : o.mode));
  const bool factored =
      ckpt->config().kv.Factored() && !DecodeModeTraitsOf(mode).reference;
  const int64_t engines =
      (1 + (factored ? 1 : 0) + (o.source.empty() ? 0 : 1)) *
      static_cast<int64_t>(o.cache_dtypes.size());
  BenchProgress progress{o, 0, 1 + 2 * engines * o.rounds};
  progress.Tell("loading the weights");
  ASSIGN_OR_RETURN(LlamaWeights w, LoadLlamaWeights(ckpt, StoredDtype()));
  std::shared_ptr<const Checkpoint> src;
  LlamaWeights sw;
  if (!o.source.empty()) {
    ASSIGN_OR_RETURN(src, Checkpoint::Open(o.source));
    ASSIGN_OR_RETURN(sw, LoadLlamaWeights(src, StoredDtype()));
  }
  std::vector<Contender> contenders;
  for (kernels::CacheDType cache : o.cache_dtypes) {
    contenders.push_back(
        {&ckpt->config(), &w, DecodeMode::kExpanded, "converted", cache});
    if (factored) {
      contenders.push_back({&ckpt->config(), &w, mode, "converted", cache});
    }
    if (src) {
      contenders.push_back(
          {&src->config(), &sw, DecodeMode::kExpanded, "source", cache});
    }
  }
  return TimeRounds(contenders, o, progress);
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
