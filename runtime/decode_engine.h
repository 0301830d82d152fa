// Incremental decode engines that hold real cache tensors. Every engine runs the same
// model shell (embedding, Q projection, QK-norm, FFN, head); they differ only in what
// they cache and how attention reads it:
//   expanded     materialised per-KV-head K (post-QK-norm, post-RoPE) and V: the
//                standard MHA/GQA/MQA cache, for any layout;
//   reconstruct  LRKV: rotated shared key, raw latents; the residual key is rebuilt and
//                rotated per position (exact, O(L·r·d_h) per head). MLA: the latent,
//                with K rebuilt per position;
//   plane        LRKV with B_h selecting whole RoPE planes: latents rotated at write
//                time with their planes' frequencies (exact, O(L·r));
//   partial      LRKV whose residual avoids the rotated planes (exact for a
//                partial-RoPE model, O(L·r)); MLA with decoupled RoPE: the latent and
//                the shared rotated key, absorbed (exact w.r.t. its own expansion);
//   naive        the paper's claim, rotating the r-dim latent: a negative control;
//   shared-plane LRKV whose K latents are planes shared by the heads, each read through
//                a per-head complex factor: rotated at write time (exact, O(L·(d_h+2m))).
// QK-norm: the key is rebuilt once at write time and σ = 1/rms(k) is cached per KV head
// and token; γ is folded into the shared key, the write-time rotation or the rebuild.
#ifndef LRKV_RUNTIME_DECODE_ENGINE_H_
#define LRKV_RUNTIME_DECODE_ENGINE_H_

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "formats/config.h"
#include "kernels/decode_params.h"
#include "runtime/llama_weights.h"
#include "runtime/rope.h"

namespace lrkv {

enum class DecodeMode { kExpanded, kReconstruct, kPlane, kPartial, kNaive, kSharedPlane };
// What a decode mode is, for code that asks about one property of it.
struct DecodeModeTraits {
  DecodeMode mode;
  const char* name;
  // The expanded engine every layout has: the reference the factored ones are
  // checked against.
  bool reference;
  // Naive decoding: the paper's claim, wrong by design (verify's negative
  // control).
  bool negative_control;
};
const DecodeModeTraits& DecodeModeTraitsOf(DecodeMode mode);
const char* DecodeModeName(DecodeMode mode);
absl::StatusOr<DecodeMode> ParseDecodeMode(const std::string& name);

/// Where plane-mode LRKV keeps its factored cache (kernels/decode_params.h).
enum class FactoredCacheLayout {
  kAuto,   ///< tiles when this CPU runs the fused tiled kernel, else rows
  kRows,   ///< [B, capacity, width] per segment
  kTiles,  ///< the fused kernel's tiled layout; capacity in whole tiles of 16
};

// A deliberate decoding error, for the negative controls of the error model's
// tests (verify/equivalence.h): never set outside them.
enum class DecodeFault {
  kNone,
  kDropSigma,   // QK-norm LRKV: attend without the cached σ
  kWrongPlane,  // plane mode: rotate each latent pair with the next plane's frequency
};

struct EngineOptions {
  /// Storage type of every cache tensor (kFloat or kBFloat16); arithmetic is fp32.
  /// kDouble with float64 weights and `materialize` makes the expanded engine the
  /// float64 reference of verify's error model.
  at::ScalarType cache_dtype = at::kFloat;
  /// DType::kQ8_0 or kQ4_0: the K/V rows (keys, values, latents) stored as
  /// ggml's blocks of 32 values with an fp16 scale, quantized once when written
  /// and read by the kernels block by block; the cache's scales (QK-norm σ)
  /// stay in cache_dtype, which must then be kFloat. Unset: every tensor in
  /// cache_dtype. An engine whose rows are not whole blocks is refused, naming
  /// the width.
  std::optional<DType> cache_blocks;
  /// Expanded engine: round each rotated query to Q8_0 blocks before its
  /// product with the keys, as llama.cpp's CPU attention does over a Q8_0 or
  /// Q4_0 key cache (ggml's vec_dot_type of both is Q8_0). Off: fp32 queries.
  bool q8_query = false;
  int64_t batch = 1;
  /// Positions allocated up front; the cache doubles when full.
  int64_t capacity = 64;
  /// Factored engines: attend through per-head K/V materialised (in fp32) from this
  /// engine's own stored cache instead of by associativity. Two engines that differ
  /// only in this flag decode the same stored cache two ways, which is how bf16
  /// equivalence is judged (FlashMLA-style: same bf16 inputs, two computations).
  bool materialize = false;
  /// false: every attention through ATen, never a kernel (the error model's
  /// twins, verify/equivalence.h).
  bool kernels = true;
  /// LRKV with an fp32 cache: ATen carries the sum of the shared and residual
  /// parts in float64 (they can be large and cancel after healing). false: in
  /// fp32, the kernels' arithmetic (the error model's fp32 twin).
  bool float64_sums = true;
  /// A negative control's decoding error (tests only).
  DecodeFault fault = DecodeFault::kNone;
  /// Plane-mode LRKV only: the layout of its shared K/V and latent caches.
  FactoredCacheLayout factored_layout = FactoredCacheLayout::kAuto;
};

struct CacheMeasurement {
  int64_t tokens = 0;
  int64_t allocated_bytes = 0;  // Σ numel × element size (tiled: whole tiles)
  int64_t used_bytes = 0;       // the part holding the `tokens` positions
};

// Tokens a Prefill sends through the layers at once.
inline constexpr int64_t kPrefillChunk = 512;

class DecodeEngine {
 public:
  virtual ~DecodeEngine() = default;

  // Appends token ids [B] at the next position; returns logits [B, V] (fp32).
  at::Tensor Step(const at::Tensor& tokens);
  // Appends token ids [T] of one sequence (batch 1) at the next T positions, layer by
  // layer: each layer's products (Q/K/V/O, FFN, the factored engines' projections) are
  // one GEMM over all T tokens, the cache entries of all T are written at once, and
  // each position then attends over the positions up to its own, as Step would.
  // Returns the last token's logits [1, V]; attention_outputs() then hold the last
  // token's.
  at::Tensor Prefill(const at::Tensor& tokens);
  // Steps each engine by one token (batch 1 each), multiplying every big matrix once
  // for all of them (a decode step streams the weights: E engines cost one pass, not
  // E). The engines must decode one model in one compute dtype, with the same stored
  // matrices (else each is stepped alone). Each engine computes what its Step would.
  static std::vector<at::Tensor> StepTogether(const std::vector<DecodeEngine*>& engines,
                                              int32_t token);
  // One step of continuous batching: each entry appends its tokens to its own
  // engine (batch 1): one token is a decode step, several a chunk of that
  // sequence's prefill. Every row of every entry goes through each big matrix
  // in one product; attention reads each engine's own cache. Returns each
  // entry's last-token logits [1, V], what its Step (or Prefill) would return;
  // with `all_logits`, every row's [n, V] (scoring a prompt). Engines as for
  // StepTogether; each appears once.
  struct BatchEntry {
    DecodeEngine* engine = nullptr;
    std::vector<int64_t> tokens;
    bool all_logits = false;
  };
  static std::vector<at::Tensor> StepBatch(
      const std::vector<BatchEntry>& entries);
  // Each layer's attention output [B, H*d_h] (before o_proj) at the last step.
  const std::vector<at::Tensor>& attention_outputs() const { return attention_; }
  CacheMeasurement MeasureCache() const;
  int64_t length() const { return length_; }
  DecodeMode mode() const { return mode_; }
  // "rows", or "tiles" for a factored cache in the kernels' tiled layout.
  virtual const char* cache_layout() const { return "rows"; }

 protected:
  DecodeEngine(const ModelConfig& config, const LlamaWeights& weights, DecodeMode mode,
               const EngineOptions& options);

  // Where the rows of an Append's input go: all B at `pos` (a step), or, for one
  // sequence (batch 1, a prefill), row t at pos + t.
  struct RowPositions {
    int64_t pos = 0;
    bool consecutive = false;
  };
  // Writes the cache entries of `layer` for its normalised input x [R, d] at `at`.
  virtual void Append(int64_t layer, const at::Tensor& x, const RowPositions& at) = 0;
  // Attention of q̂ [B, H, d_h] (after QK-norm, before RoPE; decoupled RoPE: [B, H,
  // d_h + w], the query's rotated part last, unrotated) at `pos` over positions 0..pos;
  // returns [B, H, d_h].
  virtual at::Tensor Attend(int64_t layer, const at::Tensor& q, int64_t pos) = 0;
  // Attention of q̂ [R, H, d_h] whose rows sit at `at`, each over the positions up to
  // its own; by default one Attend per row (engines override it with a causal product
  // over all rows of a prefill).
  virtual at::Tensor AttendRows(int64_t layer, const at::Tensor& q, const RowPositions& at);
  // Every cache tensor; each has its position axis (tiled: its tile axis) at dim 1
  // and holds capacity() positions.
  virtual std::vector<at::Tensor*> CacheTensors() = 0;
  // The cache entries of one new row per sequence for `engines` (this one
  // first; batch 1 each), row i of x [N, d] at engines[i]'s position
  // positions[i], computed for all rows at once and each written to its own
  // engine's cache. False, writing nothing, where this scheme or these engines
  // have no such path; RunLayers then appends engine by engine.
  virtual bool AppendTogether(int64_t layer,
                              const std::vector<DecodeEngine*>& engines,
                              const at::Tensor& x,
                              const std::vector<int64_t>& positions) {
    return false;
  }
  // Attention of one new row per sequence for `engines` (this one first; batch
  // 1 each), row i of q̂ [N, H, d_h] at engines[i]'s position positions[i], in
  // one call over their separate caches: a batched step's attention as one
  // kernel launch instead of N. Undefined where this scheme or these engines
  // have no such path; RunLayers then attends engine by engine.
  virtual at::Tensor AttendTogether(int64_t layer,
                                    const std::vector<DecodeEngine*>& engines,
                                    const at::Tensor& q,
                                    const std::vector<int64_t>& positions) {
    return {};
  }

  // Linear(x, w, b) for the rows x a slot's Append received. In a step of several
  // slots, one product of w with every slot's rows: the first slot to ask computes it,
  // the others take their rows of it, so a K/V projection streams its weight once per
  // step rather than once per sequence. Otherwise (one slot, or x not a slot's rows)
  // plain Linear.
  static at::Tensor SlotLinear(const at::Tensor& x, const at::Tensor& w,
                               const at::Tensor& b = {});

  // Allocates a cache tensor [B, capacity, rest...] of K/V values in the cache
  // dtype; with cache_blocks, as blocks of the last dimension ([B, capacity,
  // rest[:-1]..., its bytes], kByte), which must be a multiple of 32 (else a
  // c10::Error naming it, which CreateDecodeEngine returns as InvalidArgument).
  at::Tensor NewCache(std::vector<int64_t> rest) const;
  // A cache tensor of scales (QK-norm σ): in the cache dtype, never blocks.
  at::Tensor NewScaleCache(std::vector<int64_t> rest) const;
  // Writes value [B, rest...] at position pos of cache (quantized to the
  // cache's blocks where it holds them).
  void Write(at::Tensor& cache, int64_t pos, const at::Tensor& value) const;
  // Writes value [R, rest...] at `at` (rows at consecutive positions of sequence 0).
  void Write(at::Tensor& cache, const RowPositions& at, const at::Tensor& value) const;
  // Positions 0..n-1 of cache, as fp32 (blocks dequantized).
  at::Tensor Read(const at::Tensor& cache, int64_t n) const;
  // The kernels' name for this engine's K/V storage.
  kernels::CacheDType KernelCacheDType() const;
  // q [.., d] rounded to Q8_0 blocks and back where q8_query asks, else q.
  at::Tensor QueryForKeys(const at::Tensor& q) const;
  // The query grouped by KV head: [B, H_kv, g, d].
  at::Tensor Grouped(const at::Tensor& q) const;
  // Rotates x [B, n, d_h] at one position.
  at::Tensor RotateAt(int64_t layer, const at::Tensor& x, int64_t pos) const;
  // Rotates x [R, n, d_h] whose rows sit at `at`.
  at::Tensor RotateAt(int64_t layer, const at::Tensor& x, const RowPositions& at) const;
  // Rotates x [N, n, d_h] whose row i sits at positions[i] (one row of each of
  // N sequences, a batched step's AppendTogether / AttendTogether).
  at::Tensor RotateEachAt(int64_t layer, const at::Tensor& x,
                          const std::vector<int64_t>& positions) const;
  // Rope::RotatePairs of z [N, n, r] whose row i sits at positions[i].
  at::Tensor RotatePairsEachAt(int64_t layer, const at::Tensor& z,
                               const at::Tensor& planes,
                               const std::vector<int64_t>& positions) const;
  // Rows of a prefill attended at once over `n` positions: the scores [rows, H, n]
  // stay within 4M elements (16 MiB of fp32, below glibc's mmap threshold, so their
  // blocks are reused rather than mapped and faulted in afresh).
  int64_t PrefillRowChunk(int64_t n) const {
    return std::max<int64_t>(1, (int64_t{4} << 20) / std::max<int64_t>(1, config_.num_heads * n));
  }
  // True at [i, l] where position l lies after row i's position pos + i (causal mask of
  // `rows` consecutive rows over `n` positions).
  static at::Tensor FuturePositions(int64_t pos, int64_t rows, int64_t n) {
    return at::arange(n, at::kLong).unsqueeze(0) >
           at::arange(pos, pos + rows, at::kLong).unsqueeze(1);
  }
  // The query q̂ [R, H, d_h] (decoupled RoPE: [R, H, d_h + w], its rotated part last)
  // rotated for rows at `at`; decoupled RoPE turns only the last w dims.
  at::Tensor RotateQuery(int64_t layer, const at::Tensor& q, const RowPositions& at) const;
  // Rope::RotateLeadingPlanes of x [R, n, w] whose rows sit at `at`.
  at::Tensor RotateLeadingAt(int64_t layer, const at::Tensor& x, const RowPositions& at) const;
  // Rope::RotatePairs of z [R, n, r] whose rows sit at `at`.
  at::Tensor RotatePairsAt(int64_t layer, const at::Tensor& z, const at::Tensor& planes,
                           const RowPositions& at) const;
  // The rotary embedding of `layer` (SmolLM3's NoPE layers rotate nothing).
  const Rope& rope(int64_t layer) const { return ropes_[layer]; }
  // Positions allocated per cache tensor.
  int64_t capacity() const { return capacity_; }
  // Rounds the capacity up to a multiple of `positions`; before the first NewCache.
  void AlignCapacity(int64_t positions) {
    capacity_ = (capacity_ + positions - 1) / positions * positions;
  }

  // float64 for the error model's float64 engines, float32 otherwise.
  at::ScalarType compute_dtype() const {
    return options_.cache_dtype == at::kDouble ? at::kDouble : at::kFloat;
  }

  ModelConfig config_;
  // ForCompute(weights, compute_dtype()): the big matrices as stored, the rest in the
  // compute dtype.
  LlamaWeights weights_;
  DecodeMode mode_;
  EngineOptions options_;
  std::vector<Rope> ropes_;  // one per layer

 private:
  // Grows the cache (doubling) until `positions` more fit.
  void Reserve(int64_t positions);
  // Whether `e` decodes the same stored matrices as this engine in the same
  // compute dtype with batch 1, so that their rows can share one product.
  bool SharesWeightsWith(const DecodeEngine& e) const;
  // Rows [row, row + rows) of a stacked hidden state belong to `engine` at position
  // `pos` (consecutive: row t at pos + t, one sequence).
  struct Slot {
    DecodeEngine* engine;
    int64_t pos, row, rows;
    bool consecutive = false;
  };
  // The decoder layers over x [rows, d] (embedded tokens) for every slot, each slot's
  // cache written and read at its position; returns the final-normed hidden state.
  // Step (one slot of B rows), Prefill (one consecutive slot) and StepTogether (a slot
  // per engine) differ only in their slots.
  static at::Tensor RunLayers(const std::vector<Slot>& slots, at::Tensor x);
  // One layer's attention for every slot (their cache entries from h, their
  // queries q), each slot's rows in slot order: [rows, H·d_h]. Keeps each
  // engine's attention output.
  static at::Tensor AttendSlots(const std::vector<Slot>& slots, int64_t layer,
                                const at::Tensor& h, const at::Tensor& q);
  int64_t length_ = 0;
  int64_t capacity_;
  std::vector<at::Tensor> attention_;
};

// The engine for `mode`, or InvalidArgument saying why the mode does not apply to
// this model (plane mode needs B_h to select whole planes, partial a partial-RoPE
// model, factored modes an LRKV or MLA layout, naive a model with RoPE).
absl::StatusOr<std::unique_ptr<DecodeEngine>> CreateDecodeEngine(
    const ModelConfig& config, const LlamaWeights& weights, DecodeMode mode,
    const EngineOptions& options);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_DECODE_ENGINE_H_
