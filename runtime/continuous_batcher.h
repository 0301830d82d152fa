// Continuous batching on the decode engines: many sequences decode together,
// one pass over the weights per step. Each running sequence owns a decode
// engine of the model's own KV scheme (the factored cache for LRKV and MLA,
// sized for its prompt and max_tokens up front); at each step every decoding
// sequence appends one token and prompts are prefilled in chunks, all rows
// through each big matrix in one product (DecodeEngine::StepBatch). New
// requests join at step boundaries, in arrival order, while the caches of the
// running sequences and theirs fit in the KV memory; the rest wait in a bounded
// queue. A cancelled sequence is freed at the next step.
#ifndef LRKV_RUNTIME_CONTINUOUS_BATCHER_H_
#define LRKV_RUNTIME_CONTINUOUS_BATCHER_H_

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "formats/config.h"
#include "kernels/decode_params.h"
#include "runtime/decode_engine.h"
#include "runtime/sampler.h"

namespace lrkv {

class Transformer;

struct BatcherOptions {
  /// Bytes the KV caches of all running sequences may hold together.
  int64_t kv_memory = int64_t{2} << 30;
  /// Most sequences decoding at once.
  int64_t max_seqs = 16;
  /// Most requests waiting for room (sequence slots, KV memory) beyond those
  /// the next step admits; past it Submit answers ResourceExhausted.
  int64_t max_queue = 64;
  /// Longest sequence (prompt plus generated tokens) a request may ask for.
  int64_t context = 4096;
  /// Prompt tokens sent through the model per step, over all prefilling
  /// sequences (chunked prefill: decode steps of the others are never held up
  /// by more).
  int64_t prefill_chunk = 256;
  /// Storage of every cache (bf16, f32, or ggml's Q8_0/Q4_0 blocks); the KV
  /// memory admits by the bytes that storage takes.
  kernels::CacheDType cache_dtype = kernels::CacheDType::kBF16;
  /// The decode mode ("auto": the model's own factored engine, expanded for
  /// dense K/V).
  std::string mode = "auto";
  /// Products over more than 16 rows round activations to bf16 for bf16 weights
  /// (LanguageModelOptions::bf16_activations).
  bool bf16_products = false;
  /// Called on the batching thread after every step (metrics).
  struct StepReport {
    double seconds = 0;
    int64_t sequences = 0;  // entries of the step
    int64_t rows =
        0;  // tokens through the model (decode tokens + prefill chunk)
  };
  std::function<void(const StepReport&)> on_step;

  absl::Status Validate() const;
};

// ContinuousBatcher::TimeEngineSteps.
struct EngineStepTiming {
  int64_t batch = 0, context = 0, steps = 0;
  double one_ms = 0;    // median 1-sequence decode step
  double batch_ms = 0;  // median `batch`-sequence decode step
};

struct SequenceRequest {
  /// Token ids of the prompt, BOS included where the model wants one.
  std::vector<int32_t> prompt;
  /// New tokens at most (0: only score the prompt).
  int64_t max_tokens = 16;
  SamplingOptions sampling;
  /// Ends the sequence at the model's end-of-sequence tokens (they are not
  /// returned).
  bool stop_at_eos = true;
  /// Each generated token comes with this many most likely alternatives.
  int64_t top_logprobs = 0;
  /// Also the log-probability of every prompt token after the first (scoring,
  /// echo).
  bool prompt_logprobs = false;
};

struct GeneratedToken {
  int32_t id = 0;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;  // top_logprobs alternatives
};

enum class FinishReason {
  kNone,
  kLength,
  kEos,
  kCancelled,
  kFailed,
  kShutdown
};
// "length", "stop", "cancelled", "error", "shutdown" ("" for kNone).
const char* FinishReasonName(FinishReason reason);

// What a sequence produced since the previous Take.
struct SequenceUpdate {
  /// Prompt tokens 1..n-1 with their log-probabilities and alternatives (once).
  std::vector<GeneratedToken> prompt;
  std::vector<GeneratedToken> tokens;
  FinishReason finish = FinishReason::kNone;
  absl::Status error;  // kFailed: why
};

// The requester's handle on a submitted sequence; thread-safe.
class Sequence {
 public:
  // What was produced since the last call, waiting up to `timeout` for
  // something new.
  SequenceUpdate Take(std::chrono::milliseconds timeout);
  // Asks the batcher to stop and free the sequence at its next step; a queued
  // one no longer counts against the queue from now.
  void Cancel() { cancelled_ = true; }
  bool finished() const;

 private:
  friend class ContinuousBatcher;
  void Publish(SequenceUpdate update);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  SequenceUpdate pending_;
  bool finished_ = false;
  std::atomic<bool> cancelled_{false};
};

struct BatcherStats {
  int64_t running = 0;  // sequences decoding (a finished one not, at once)
  int64_t queued = 0;   // waiting for admission (a cancelled one not, at once)
  int64_t kv_bytes_in_use = 0;  // allocated by the running sequences' caches
  int64_t kv_bytes_budget = 0;  // BatcherOptions::kv_memory
  int64_t peak_running = 0;
  int64_t submitted = 0;         // requests accepted by Submit, all time
  int64_t prompt_tokens = 0;     // prefilled, all time
  int64_t generated_tokens = 0;  // sampled, all time
  int64_t cancelled = 0;  // sequences cancelled (running or queued), all time
};

class ContinuousBatcher {
 public:
  // `model` must outlive the batcher. Starts the batching thread.
  static absl::StatusOr<std::unique_ptr<ContinuousBatcher>> Create(
      const Transformer& model, BatcherOptions options);
  // Cancels every sequence and joins the thread.
  ~ContinuousBatcher();

  // Queues a request. InvalidArgument when it can never run here (empty prompt,
  // ids outside the vocabulary, longer than the context, a cache larger than
  // the KV memory), ResourceExhausted when the queue is full, Unavailable once
  // draining or shutting down.
  absl::StatusOr<std::shared_ptr<Sequence>> Submit(SequenceRequest request);

  // Stops admitting: Submit answers Unavailable from now and every queued
  // request ends with kShutdown; the running sequences go on until `deadline`,
  // then end with kShutdown at the next step.
  void Drain(std::chrono::steady_clock::time_point deadline);
  // Whether no sequence runs or waits.
  bool Idle() const;

  // Bytes the cache of one sequence of `tokens` positions allocates.
  int64_t CacheBytes(int64_t tokens) const;
  // Sequences of `tokens` positions whose caches fit in the KV memory together.
  int64_t SequencesThatFit(int64_t tokens) const;
  BatcherStats Stats() const;
  // This batcher's engines alone, outside the serving loop: `steps` times, a
  // decode step of one sequence then one of `batch` sequences (alternated, so
  // that both see the same load), every cache at about `context` positions;
  // the medians. What a step costs without sampling, streaming or queueing.
  absl::StatusOr<EngineStepTiming> TimeEngineSteps(int64_t batch,
                                                   int64_t context,
                                                   int64_t steps) const;
  // InvalidArgument unless TimeEngineSteps can take these settings.
  static absl::Status CheckEngineSteps(int64_t batch, int64_t context,
                                       int64_t steps);
  DecodeMode mode() const { return mode_; }
  const BatcherOptions& options() const { return options_; }

 private:
  struct Queued;
  struct Running;
  ContinuousBatcher(const Transformer& model, BatcherOptions options,
                    DecodeMode mode, LlamaWeights weights);
  void Loop();
  // Moves queued requests to the running set while their caches fit (in order).
  void AdmitLocked();
  // How many queued requests (from the front) the next admission takes; *kv and
  // *running: the KV bytes and sequences once it has.
  int64_t AdmissibleLocked(int64_t* kv, int64_t* running) const;
  // The admission rule, stated once: a request of `bytes` starts beside
  // `running` sequences holding `kv` bytes.
  bool Fits(int64_t kv, int64_t running, int64_t bytes) const;
  // Whether a new request of `bytes` is refused: it would not start at the next
  // step, and max_queue requests already wait.
  bool QueueFullLocked(int64_t bytes) const;
  // Drops the cancelled requests from the queue (their slots free at once).
  void PurgeCancelledLocked();
  // Frees cancelled sequences (and, past the drain deadline, every one); one
  // step of every running one; publishes the results.
  void Step();
  // Samples after `logits` [1, V] (or [n, V] for a scored chunk), publishes,
  // finishes.
  void Advance(Running& r, const at::Tensor& logits, int64_t prefill_rows);
  void Finish(Running& r, FinishReason reason,
              absl::Status error = absl::OkStatus());

  const Transformer& model_;
  const BatcherOptions options_;
  const DecodeMode mode_;
  const LlamaWeights weights_;  // ForCompute'd once: every engine shares them
  int64_t bytes_per_16_tokens_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Queued>> queue_;
  bool stopping_ = false;
  bool draining_ = false;
  std::chrono::steady_clock::time_point drain_deadline_;
  BatcherStats stats_;
  std::vector<std::unique_ptr<Running>>
      running_;  // batching thread, admitted under mu_
  std::thread thread_;
};

}  // namespace lrkv

#endif  // LRKV_RUNTIME_CONTINUOUS_BATCHER_H_
