#include "runtime/continuous_batcher.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/median.h"
#include "base/status_macros.h"
#include "runtime/cache_dtype.h"
#include "runtime/kv_layout.h"
#include "runtime/stored_linear.h"
#include "runtime/transformer.h"

namespace lrkv {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kEos:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kFailed:
      return "error";
    case FinishReason::kShutdown:
      return "shutdown";
  }
  return "";
}

absl::Status BatcherOptions::Validate() const {
  if (kv_memory <= 0)
    return absl::InvalidArgumentError("the KV memory must be > 0 bytes");
  if (max_seqs < 1) return absl::InvalidArgumentError("max_seqs must be >= 1");
  if (max_queue < 0)
    return absl::InvalidArgumentError("the queue length must be >= 0");
  if (context < 1)
    return absl::InvalidArgumentError("the context must be >= 1 token");
  if (prefill_chunk < 1 || prefill_chunk > kPrefillChunk) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prefill chunk must be in [1, ", kPrefillChunk,
                     "], got ", prefill_chunk));
  }
  return absl::OkStatus();
}

SequenceUpdate Sequence::Take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] {
    return !pending_.tokens.empty() || !pending_.prompt.empty() ||
           pending_.finish != FinishReason::kNone;
  });
  SequenceUpdate out = std::move(pending_);
  pending_ = SequenceUpdate();
  return out;
}

bool Sequence::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void Sequence::Publish(SequenceUpdate update) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : update.prompt) pending_.prompt.push_back(std::move(t));
    for (auto& t : update.tokens) pending_.tokens.push_back(std::move(t));
    if (update.finish != FinishReason::kNone) {
      pending_.finish = update.finish;
      pending_.error = update.error;
      finished_ = true;
    }
  }
  cv_.notify_all();
}

struct ContinuousBatcher::Queued {
  SequenceRequest request;
  std::shared_ptr<Sequence> handle;
  int64_t bytes = 0;
};

struct ContinuousBatcher::Running {
  SequenceRequest request;
  std::shared_ptr<Sequence> handle;
  int64_t bytes = 0;
  std::unique_ptr<DecodeEngine> engine;
  Sampler sampler;
  int64_t prefilled = 0;  // prompt tokens in the cache
  int64_t generated = 0;
  int32_t next = -1;  // the token the next decode step appends
  bool done = false;

  Running(Queued q, std::unique_ptr<DecodeEngine> e)
      : request(std::move(q.request)),
        handle(std::move(q.handle)),
        bytes(q.bytes),
        engine(std::move(e)),
        sampler(request.sampling) {}
  int64_t prompt_length() const {
    return static_cast<int64_t>(request.prompt.size());
  }
};

namespace {

int64_t RoundUp16(int64_t n) { return (n + 15) / 16 * 16; }

absl::StatusOr<DecodeMode> ServingMode(const ModelConfig& c,
                                       const std::string& mode) {
  if (mode != "auto") return ParseDecodeMode(mode);
  return KvLayoutTypeOf(c.kv.layout).ServingMode(c);
}

EngineOptions EngineOptionsFor(const BatcherOptions& o, int64_t positions) {
  EngineOptions eo;
  CacheDtypeOf(o.cache_dtype).ApplyTo(&eo);
  eo.capacity = RoundUp16(positions);
  return eo;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ContinuousBatcher>> ContinuousBatcher::Create(
    const Transformer& model, BatcherOptions options) {
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(DecodeMode mode, ServingMode(model.config(), options.mode));
  try {
    LlamaWeights weights = ForCompute(model.weights(), at::kFloat);
    // A probe engine measures the scheme's cache per position (its own layout).
    ASSIGN_OR_RETURN(auto probe,
                     CreateDecodeEngine(model.config(), weights, mode,
                                        EngineOptionsFor(options, 256)));
    const int64_t per_16 = probe->MeasureCache().allocated_bytes / 16;
    std::unique_ptr<ContinuousBatcher> b(new ContinuousBatcher(
        model, std::move(options), mode, std::move(weights)));
    b->bytes_per_16_tokens_ = per_16;
    b->thread_ = std::thread([p = b.get()] { p->Loop(); });
    return b;
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("starting the batcher: ", e.what_without_backtrace()));
  }
}

ContinuousBatcher::ContinuousBatcher(const Transformer& model,
                                     BatcherOptions options, DecodeMode mode,
                                     LlamaWeights weights)
    : model_(model),
      options_(std::move(options)),
      mode_(mode),
      weights_(std::move(weights)) {
  stats_.kv_bytes_budget = options_.kv_memory;
}

ContinuousBatcher::~ContinuousBatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& r : running_) {
    if (!r->done) Finish(*r, FinishReason::kCancelled);
  }
  for (auto& q : queue_)
    q->handle->Publish({{}, {}, FinishReason::kCancelled, {}});
}

int64_t ContinuousBatcher::CacheBytes(int64_t tokens) const {
  return RoundUp16(tokens) / 16 * bytes_per_16_tokens_;
}

int64_t ContinuousBatcher::SequencesThatFit(int64_t tokens) const {
  const int64_t each = CacheBytes(tokens);
  return each > 0 ? options_.kv_memory / each : 0;
}

BatcherStats ContinuousBatcher::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  BatcherStats s = stats_;
  s.queued = 0;
  for (const auto& q : queue_) {
    if (q->handle->cancelled_) {
      ++s.cancelled;  // counted when purged; reported from now
    } else {
      ++s.queued;
    }
  }
  return s;
}

void ContinuousBatcher::PurgeCancelledLocked() {
  auto cancelled = [](const std::unique_ptr<Queued>& q) {
    return q->handle->cancelled_.load();
  };
  for (auto& q : queue_) {
    if (cancelled(q)) {
      q->handle->Publish({{}, {}, FinishReason::kCancelled, {}});
      ++stats_.cancelled;
    }
  }
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(), cancelled),
               queue_.end());
}

void ContinuousBatcher::Drain(std::chrono::steady_clock::time_point deadline) {
  std::deque<std::unique_ptr<Queued>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    drain_deadline_ = deadline;
    queued.swap(queue_);
  }
  for (auto& q : queued) {
    q->handle->Publish({{}, {}, FinishReason::kShutdown, {}});
  }
  cv_.notify_all();
}

bool ContinuousBatcher::Idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && stats_.running == 0;
}

absl::StatusOr<std::shared_ptr<Sequence>> ContinuousBatcher::Submit(
    SequenceRequest request) {
  const ModelConfig& c = model_.config();
  const auto prompt = static_cast<int64_t>(request.prompt.size());
  if (prompt == 0)
    return absl::InvalidArgumentError("the prompt has no tokens");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ",
                       c.vocab_size, ")"));
    }
  }
  if (request.max_tokens < 0)
    return absl::InvalidArgumentError("max_tokens must be >= 0");
  if (prompt + request.max_tokens > options_.context) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt (", prompt, " tokens) plus max_tokens (",
                     request.max_tokens, ") exceeds the context of ",
                     options_.context, " tokens"));
  }
  if (request.top_logprobs < 0 || request.top_logprobs > 20) {
    return absl::InvalidArgumentError("top logprobs must be in [0, 20]");
  }
  RETURN_IF_ERROR(request.sampling.Validate());
  auto q = std::make_unique<Queued>();
  q->bytes = CacheBytes(prompt + request.max_tokens);
  if (q->bytes > options_.kv_memory) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a sequence of ", prompt + request.max_tokens, " tokens needs ",
        q->bytes, " bytes of KV cache, more than the server's KV memory of ",
        options_.kv_memory));
  }
  q->request = std::move(request);
  q->handle = std::make_shared<Sequence>();
  auto handle = q->handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || draining_) {
      return absl::UnavailableError("the server is shutting down");
    }
    PurgeCancelledLocked();
    if (QueueFullLocked(q->bytes)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the server is full: ", stats_.running,
                       " sequences running and ", queue_.size(), " waiting"));
    }
    queue_.push_back(std::move(q));
    ++stats_.submitted;
  }
  cv_.notify_all();
  return handle;
}

absl::Status ContinuousBatcher::CheckEngineSteps(int64_t batch, int64_t context,
                                                 int64_t steps) {
  // The first engine takes both kinds of step: 2·steps positions past a
  // prompt of at least one token.
  if (batch < 2 || steps < 1 || context <= 2 * steps + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine steps: the batch (", batch, ") must be >= 2, the steps (",
        steps, ") >= 1, and the context must exceed 2 * steps + 1 (got ",
        context, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<EngineStepTiming> ContinuousBatcher::TimeEngineSteps(
    int64_t batch, int64_t context, int64_t steps) const {
  RETURN_IF_ERROR(CheckEngineSteps(batch, context, steps));
  const int64_t prompt = context - 2 * steps - 1;
  at::NoGradGuard no_grad;
  const Bf16ProductsScope bf16(options_.bf16_products);
  const int64_t vocab = model_.config().vocab_size;
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  try {
    std::vector<std::unique_ptr<DecodeEngine>> engines;
    std::vector<DecodeEngine::BatchEntry> prompts, all;
    for (int64_t i = 0; i < batch; ++i) {
      ASSIGN_OR_RETURN(auto engine,
                       CreateDecodeEngine(model_.config(), weights_, mode_,
                                          EngineOptionsFor(options_, context)));
      std::vector<int64_t> tokens(prompt);
      for (int64_t t = 0; t < prompt; ++t) tokens[t] = (7 * t + i) % vocab;
      prompts.push_back({engine.get(), std::move(tokens), false});
      all.push_back({engine.get(), {(i + 1) % vocab}, false});
      engines.push_back(std::move(engine));
    }
    // Every prompt in one pass over the weights.
    DecodeEngine::StepBatch(prompts);
    EngineStepTiming timing{batch, context, steps};
    std::vector<double> one, many;
    for (int64_t k = 0; k < steps; ++k) {
      const auto t0 = Clock::now();
      DecodeEngine::StepBatch({all[0]});
      const auto t1 = Clock::now();
      DecodeEngine::StepBatch(all);
      one.push_back(ms(t0, t1));
      many.push_back(ms(t1, Clock::now()));
    }
    timing.one_ms = Median(std::move(one));
    timing.batch_ms = Median(std::move(many));
    return timing;
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("engine steps: ", e.what_without_backtrace()));
  }
}

bool ContinuousBatcher::Fits(int64_t kv, int64_t running, int64_t bytes) const {
  return running < options_.max_seqs && kv + bytes <= options_.kv_memory;
}

int64_t ContinuousBatcher::AdmissibleLocked(int64_t* kv,
                                            int64_t* running) const {
  *kv = stats_.kv_bytes_in_use;
  *running = stats_.running;
  int64_t n = 0;
  for (const auto& q : queue_) {
    if (!Fits(*kv, *running, q->bytes)) break;
    *kv += q->bytes;
    ++*running;
    ++n;
  }
  return n;
}

bool ContinuousBatcher::QueueFullLocked(int64_t bytes) const {
  int64_t kv, running;
  const int64_t admitted = AdmissibleLocked(&kv, &running);
  const int64_t waiting = static_cast<int64_t>(queue_.size()) - admitted;
  const bool starts_now = waiting == 0 && Fits(kv, running, bytes);
  return !starts_now && waiting >= options_.max_queue;
}

void ContinuousBatcher::AdmitLocked() {
  while (!queue_.empty() &&
         Fits(stats_.kv_bytes_in_use, stats_.running, queue_.front()->bytes)) {
    std::unique_ptr<Queued> q = std::move(queue_.front());
    queue_.pop_front();
    if (q->handle->cancelled_) {
      q->handle->Publish({{}, {}, FinishReason::kCancelled, {}});
      ++stats_.cancelled;
      continue;
    }
    const int64_t positions =
        static_cast<int64_t>(q->request.prompt.size()) + q->request.max_tokens;
    auto engine = CreateDecodeEngine(
        model_.config(), weights_, mode_,
        EngineOptionsFor(options_, std::max<int64_t>(positions, 1)));
    if (!engine.ok()) {
      q->handle->Publish({{}, {}, FinishReason::kFailed, engine.status()});
      continue;
    }
    stats_.kv_bytes_in_use += q->bytes;
    running_.push_back(
        std::make_unique<Running>(std::move(*q), std::move(*engine)));
    ++stats_.running;
    stats_.peak_running = std::max(stats_.peak_running, stats_.running);
  }
}

void ContinuousBatcher::Loop() {
  at::NoGradGuard no_grad;
  const Bf16ProductsScope bf16(options_.bf16_products);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !queue_.empty() || !running_.empty();
      });
      if (stopping_) return;
      AdmitLocked();
    }
    Step();
  }
}

void ContinuousBatcher::Step() {
  bool past_drain;
  {
    std::lock_guard<std::mutex> lock(mu_);
    past_drain =
        draining_ && std::chrono::steady_clock::now() >= drain_deadline_;
  }
  for (auto& r : running_) {
    if (r->done) continue;
    if (r->handle->cancelled_) {
      Finish(*r, FinishReason::kCancelled);
    } else if (past_drain) {
      Finish(*r, FinishReason::kShutdown);
    }
  }
  std::vector<DecodeEngine::BatchEntry> entries;
  std::vector<Running*> owners;
  std::vector<int64_t> prefill_rows;
  int64_t chunk = options_.prefill_chunk, rows = 0;
  for (auto& r : running_) {
    if (r->done) continue;
    const int64_t left = r->prompt_length() - r->prefilled;
    if (left > 0) {
      if (chunk == 0) continue;
      const int64_t n = std::min(chunk, left);
      chunk -= n;
      const auto begin = r->request.prompt.begin() + r->prefilled;
      entries.push_back({r->engine.get(),
                         std::vector<int64_t>(begin, begin + n),
                         r->request.prompt_logprobs});
      prefill_rows.push_back(n);
    } else {
      entries.push_back({r->engine.get(), {r->next}, false});
      prefill_rows.push_back(0);
    }
    owners.push_back(r.get());
    rows += static_cast<int64_t>(entries.back().tokens.size());
  }
  if (!entries.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<at::Tensor> logits;
    try {
      logits = DecodeEngine::StepBatch(entries);
    } catch (const c10::Error& e) {
      for (Running* r : owners) {
        Finish(*r, FinishReason::kFailed,
               absl::InternalError(
                   absl::StrCat("decode step: ", e.what_without_backtrace())));
      }
    }
    for (size_t i = 0; i < logits.size(); ++i)
      Advance(*owners[i], logits[i], prefill_rows[i]);
    if (options_.on_step) {
      options_.on_step(
          {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
               .count(),
           static_cast<int64_t>(entries.size()), rows});
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(
      std::remove_if(running_.begin(), running_.end(),
                     [](const std::unique_ptr<Running>& r) { return r->done; }),
      running_.end());
}

void ContinuousBatcher::Advance(Running& r, const at::Tensor& logits,
                                int64_t prefill_rows) {
  SequenceUpdate update;
  at::Tensor last = logits;
  if (prefill_rows > 0) {
    const int64_t p0 = r.prefilled;
    r.prefilled += prefill_rows;
    if (r.request.prompt_logprobs) {
      // Row t predicts prompt token p0 + t + 1.
      for (int64_t t = 0; t < prefill_rows && p0 + t + 1 < r.prompt_length();
           ++t) {
        const std::vector<double> lp = Sampler::LogSoftmax(logits[t]);
        GeneratedToken g;
        g.id = r.request.prompt[p0 + t + 1];
        g.logprob = lp[g.id];
        if (r.request.top_logprobs > 0)
          g.top = Sampler::Top(lp, r.request.top_logprobs);
        update.prompt.push_back(std::move(g));
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.prompt_tokens += prefill_rows;
    }
    last = logits.narrow(0, logits.size(0) - 1, 1);
    if (r.prefilled < r.prompt_length()) {
      if (!update.prompt.empty()) r.handle->Publish(std::move(update));
      return;
    }
  }
  if (r.generated >=
      r.request.max_tokens) {  // max_tokens 0: the prompt was all
    r.handle->Publish(std::move(update));
    Finish(r, FinishReason::kLength);
    return;
  }
  SampledToken s = r.sampler.Sample(last, r.request.top_logprobs);
  if (r.request.stop_at_eos && model_.config().IsEos(s.id)) {
    r.handle->Publish(std::move(update));
    Finish(r, FinishReason::kEos);
    return;
  }
  GeneratedToken g{s.id, s.logprob, std::move(s.top)};
  update.tokens.push_back(std::move(g));
  r.next = s.id;
  ++r.generated;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.generated_tokens;
  }
  r.handle->Publish(std::move(update));
  if (r.generated >= r.request.max_tokens) Finish(r, FinishReason::kLength);
}

void ContinuousBatcher::Finish(Running& r, FinishReason reason,
                               absl::Status error) {
  if (r.done) return;
  r.done = true;
  r.engine.reset();
  {
    // Its slot is free from now: a finished sequence stays in running_ until
    // the step ends, but no longer counts against max_seqs (a request arriving
    // in between was refused as overload).
    std::lock_guard<std::mutex> lock(mu_);
    stats_.kv_bytes_in_use -= r.bytes;
    --stats_.running;
    if (reason == FinishReason::kCancelled) ++stats_.cancelled;
  }
  r.handle->Publish({{}, {}, reason, std::move(error)});
  cv_.notify_all();
}

}  // namespace lrkv
