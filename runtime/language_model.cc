// A loaded checkpoint with its tokenizer (see language_model.h). LibTorch errors
// (c10::Error) are caught here, at the library's edge.
#include "runtime/language_model.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/checkpoint.h"
#include "runtime/cache_dtype.h"
#include "runtime/kv_layout.h"
#include "runtime/llama_weights.h"
#include "runtime/perplexity.h"
#include "runtime/stored_linear.h"
#include "runtime/transformer.h"

namespace lrkv {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

absl::Status FromTorch(const c10::Error& e, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
}

// "bf16" when bf16 products apply to `w` (see LanguageModelOptions).
std::string Products(const LlamaWeights& w, const LanguageModelOptions& options) {
  const bool bf16 = !w.layers.empty() && w.layers[0].w_gate.scalar_type() == at::kBFloat16;
  return options.bf16_activations && bf16 && Bf16ProductsScope::Available() ? "bf16" : "fp32";
}

}  // namespace

LanguageModel::LanguageModel(std::unique_ptr<Transformer> t, Tokenizer tok,
                             std::string products)
    : transformer_(std::move(t)), tokenizer_(std::move(tok)), products_(std::move(products)) {}
LanguageModel::~LanguageModel() = default;

const ModelConfig& LanguageModel::config() const { return transformer_->config(); }

absl::StatusOr<std::unique_ptr<LanguageModel>> LanguageModel::Load(
    const std::string& path, const LanguageModelOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt, Checkpoint::Open(path));
  ASSIGN_OR_RETURN(const Tokenizer* tok, ckpt->RequireTokenizer());
  try {
    // Inference only: the weights stay in the map, in their stored dtype.
    ASSIGN_OR_RETURN(LlamaWeights w, LoadLlamaWeights(ckpt, StoredDtype()));
    std::string products = Products(w, options);
    ASSIGN_OR_RETURN(auto t, Transformer::Create(ckpt->config(), std::move(w)));
    return std::unique_ptr<LanguageModel>(
        new LanguageModel(std::move(t), *tok, std::move(products)));
  } catch (const c10::Error& e) {
    return FromTorch(e, path);
  }
}

absl::StatusOr<PerplexityResult> LanguageModel::Perplexity(
    const std::vector<std::string>& docs, const StopCheck& stop,
    const std::string& cache_dtype, bool q8_query) const {
  const auto t0 = std::chrono::steady_clock::now();
  PerplexityResult r;
  r.products = products_;
  std::optional<CacheScoring> cache;
  if (q8_query && cache_dtype.empty()) {
    return absl::InvalidArgumentError(
        "rounding the query to Q8_0 needs a cache dtype");
  }
  if (!cache_dtype.empty()) {
    ASSIGN_OR_RETURN(const CacheDtype storage, ParseCacheDtype(cache_dtype));
    cache.emplace();
    cache->mode = KvLayoutTypeOf(config().kv.layout).ServingMode(config());
    storage.ApplyTo(&cache->engine);
    cache->engine.q8_query = q8_query;
    r.cache_dtype = storage.name;
    r.decode_mode = DecodeModeName(cache->mode);
  }
  try {
    const Bf16ProductsScope bf16(products_ == "bf16");
    ASSIGN_OR_RETURN(PerplexityStats stats,
                     MeasurePerplexity(*transformer_, tokenizer_, docs, stop,
                                       cache ? &*cache : nullptr));
    r.documents = stats.documents;
    r.tokens = stats.tokens;
    r.total_nll = stats.total_nll;
    r.mean_nll = stats.mean_nll();
    r.perplexity = stats.perplexity();
  } catch (const c10::Error& e) {
    return FromTorch(e, "perplexity");
  }
  r.seconds = SecondsSince(t0);
  return r;
}

absl::StatusOr<GenerationResult> LanguageModel::Generate(const std::string& prompt,
                                                         int64_t max_tokens) const {
  if (max_tokens < 0 || max_tokens > 1'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("max tokens must be in [0, 1000000], got ", max_tokens));
  }
  const auto t0 = std::chrono::steady_clock::now();
  GenerationResult r;
  r.prompt_ids.push_back(tokenizer_.document_start_id());
  for (int32_t id : tokenizer_.Encode(prompt)) r.prompt_ids.push_back(id);
  try {
    const Bf16ProductsScope bf16(products_ == "bf16");
    r.new_ids = transformer_->GenerateGreedy(r.prompt_ids, max_tokens, true);
  } catch (const c10::Error& e) {
    return FromTorch(e, "generate");
  }
  for (int32_t id : r.new_ids) r.continuation += tokenizer_.TokenToPiece(id);
  r.seconds = SecondsSince(t0);
  return r;
}

}  // namespace lrkv
