// The model shell shared by every decode engine, and the engine factory.
#include "runtime/decode_engine.h"

#include "absl/strings/str_cat.h"
#include "base/block_quant.h"
#include "runtime/engines.h"
#include "runtime/kv_layout.h"
#include "runtime/layers.h"

namespace lrkv {

const DecodeModeTraits& DecodeModeTraitsOf(DecodeMode mode) {
  // In DecodeMode order.
  static constexpr DecodeModeTraits kModes[] = {
      {DecodeMode::kExpanded, "expanded", true, false},
      {DecodeMode::kReconstruct, "reconstruct", false, false},
      {DecodeMode::kPlane, "plane", false, false},
      {DecodeMode::kPartial, "partial", false, false},
      {DecodeMode::kNaive, "naive", false, true},
      {DecodeMode::kSharedPlane, "shared-plane", false, false},
  };
  return kModes[static_cast<int>(mode)];
}

const char* DecodeModeName(DecodeMode mode) {
  return DecodeModeTraitsOf(mode).name;
}

absl::StatusOr<DecodeMode> ParseDecodeMode(const std::string& name) {
  for (DecodeMode m :
       {DecodeMode::kExpanded, DecodeMode::kReconstruct, DecodeMode::kPlane,
        DecodeMode::kPartial, DecodeMode::kNaive, DecodeMode::kSharedPlane}) {
    if (name == DecodeModeName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown decode mode '", name,
                   "'; valid: reconstruct, plane, partial, naive, shared-plane, all"));
}

DecodeEngine::DecodeEngine(const ModelConfig& config,
                           const LlamaWeights& weights, DecodeMode mode,
                           const EngineOptions& options)
    : config_(config),
      weights_(ForCompute(weights, options.cache_dtype == at::kDouble ? at::kDouble
                                                                         : at::kFloat)),
      mode_(mode),
      options_(options),
      ropes_(LayerRopes(config)),
      capacity_(std::max<int64_t>(1, options.capacity)) {}

at::Tensor DecodeEngine::NewCache(std::vector<int64_t> rest) const {
  if (!options_.cache_blocks) return NewScaleCache(std::move(rest));
  const int64_t width = rest.empty() ? 1 : rest.back();
  const std::optional<uint64_t> bytes =
      TensorBytes(*options_.cache_blocks, width, width);
  TORCH_CHECK(bytes.has_value(), "a ", DTypeName(*options_.cache_blocks),
              " cache stores blocks of 32 values, which do not divide a cached "
              "row of ",
              width, " (", DecodeModeName(mode_), " decoding of this model)");
  rest.back() = static_cast<int64_t>(*bytes);
  rest.insert(rest.begin(), {options_.batch, capacity_});
  return at::zeros(rest, at::TensorOptions().dtype(at::kByte));
}

at::Tensor DecodeEngine::NewScaleCache(std::vector<int64_t> rest) const {
  rest.insert(rest.begin(), {options_.batch, capacity_});
  return at::zeros(rest, at::TensorOptions().dtype(options_.cache_dtype));
}

namespace {

// value (numel a multiple of 32) as blocks, shaped `sizes` (kByte, whose last
// dimension is the bytes of a row).
at::Tensor QuantizeRows(DType blocks, const at::Tensor& value,
                        at::IntArrayRef sizes) {
  const auto x = value.to(at::kFloat).contiguous();
  auto out = at::empty(sizes, at::kByte);
  TORCH_CHECK(out.numel() == static_cast<int64_t>(*TensorBytes(
                                 blocks, x.numel(), BlockValues(blocks))),
              "cache entry of ", x.numel(), " values for a slot of ",
              out.numel(), " bytes");
  QuantizeBlocks(blocks, x.data_ptr<float>(), x.numel(),
                 out.data_ptr<uint8_t>());
  return out;
}

// The inverse: stored [..., bytes] as fp32 [..., values].
at::Tensor DequantizeRows(DType blocks, const at::Tensor& stored) {
  const auto x = stored.contiguous();
  auto sizes = x.sizes().vec();
  sizes.back() = sizes.back() / static_cast<int64_t>(BlockBytes(blocks)) *
                 static_cast<int64_t>(BlockValues(blocks));
  auto out = at::empty(sizes, at::kFloat);
  DequantizeBlocks(blocks, x.data_ptr<uint8_t>(), out.numel(),
                   out.data_ptr<float>());
  return out;
}

}  // namespace

void DecodeEngine::Write(at::Tensor& cache, int64_t pos,
                         const at::Tensor& value) const {
  auto slot = cache.select(1, pos);
  slot.copy_(cache.scalar_type() == at::kByte
                 ? QuantizeRows(*options_.cache_blocks, value, slot.sizes())
                 : value);
}

void DecodeEngine::Write(at::Tensor& cache, const RowPositions& at,
                         const at::Tensor& value) const {
  if (!at.consecutive) return Write(cache, at.pos, value);
  auto slot = cache.select(0, 0).narrow(0, at.pos, value.size(0));
  slot.copy_(cache.scalar_type() == at::kByte
                 ? QuantizeRows(*options_.cache_blocks, value, slot.sizes())
                 : value);
}

at::Tensor DecodeEngine::Read(const at::Tensor& cache, int64_t n) const {
  if (cache.scalar_type() == at::kByte)
    return DequantizeRows(*options_.cache_blocks, cache.narrow(1, 0, n))
        .to(compute_dtype());
  // bf16 storage is read in fp32; the float64 reference engine stays in float64.
  const auto dtype = cache.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return cache.narrow(1, 0, n).to(dtype);
}

at::Tensor DecodeEngine::QueryForKeys(const at::Tensor& q) const {
  if (!options_.q8_query) return q;
  const int64_t blocks = q.numel() / kernels::kQuantBlock;
  return DequantizeRows(
             DType::kQ8_0,
             QuantizeRows(DType::kQ8_0, q,
                          {blocks, static_cast<int64_t>(kQ8_0BlockBytes)}))
      .view(q.sizes())
      .to(q.scalar_type());
}

kernels::CacheDType DecodeEngine::KernelCacheDType() const {
  if (options_.cache_blocks == DType::kQ8_0) return kernels::CacheDType::kQ8_0;
  if (options_.cache_blocks == DType::kQ4_0) return kernels::CacheDType::kQ4_0;
  return options_.cache_dtype == at::kBFloat16 ? kernels::CacheDType::kBF16
                                               : kernels::CacheDType::kF32;
}

at::Tensor DecodeEngine::Grouped(const at::Tensor& q) const {
  // Explicit group size: q may have zero columns (an LRKV latent of rank 0).
  const int64_t group = config_.num_heads / config_.num_kv_heads;
  return q.reshape({q.size(0), config_.num_kv_heads, group, q.size(-1)});
}

at::Tensor DecodeEngine::RotateAt(int64_t layer, const at::Tensor& x, int64_t pos) const {
  return rope(layer).Rotate(x.unsqueeze(1), at::full({1}, pos, at::kLong)).squeeze(1);
}

at::Tensor DecodeEngine::RotateAt(int64_t layer, const at::Tensor& x,
                                  const RowPositions& at) const {
  if (!at.consecutive) return RotateAt(layer, x, at.pos);
  const auto positions = at::arange(at.pos, at.pos + x.size(0), at::kLong);
  return rope(layer).Rotate(x.unsqueeze(0), positions).squeeze(0);
}

namespace {
// positions as [N, 1]: row i is sequence i's one position (Rope's [B, T] form).
at::Tensor EachPosition(const std::vector<int64_t>& positions) {
  return at::tensor(positions, at::kLong).unsqueeze(1);
}
}  // namespace

at::Tensor DecodeEngine::RotateEachAt(
    int64_t layer, const at::Tensor& x,
    const std::vector<int64_t>& positions) const {
  return rope(layer).Rotate(x.unsqueeze(1), EachPosition(positions)).squeeze(1);
}

at::Tensor DecodeEngine::RotatePairsEachAt(
    int64_t layer, const at::Tensor& z, const at::Tensor& planes,
    const std::vector<int64_t>& positions) const {
  return rope(layer)
      .RotatePairs(z.unsqueeze(1), EachPosition(positions), planes)
      .squeeze(1);
}

at::Tensor DecodeEngine::RotateLeadingAt(int64_t layer, const at::Tensor& x,
                                         const RowPositions& at) const {
  if (!at.consecutive) {
    return rope(layer).RotateLeadingPlanes(x.unsqueeze(1), at::full({1}, at.pos, at::kLong))
        .squeeze(1);
  }
  const auto positions = at::arange(at.pos, at.pos + x.size(0), at::kLong);
  return rope(layer).RotateLeadingPlanes(x.unsqueeze(0), positions).squeeze(0);
}

at::Tensor DecodeEngine::RotateQuery(int64_t layer, const at::Tensor& q,
                                     const RowPositions& at) const {
  if (!config_.kv.DecoupledRope()) return RotateAt(layer, q, at);
  const int64_t dh = config_.head_dim, w = config_.kv.RopeWidth();
  return at::cat({q.narrow(-1, 0, dh), RotateLeadingAt(layer, q.narrow(-1, dh, w), at)}, -1);
}

at::Tensor DecodeEngine::RotatePairsAt(int64_t layer, const at::Tensor& z,
                                       const at::Tensor& planes, const RowPositions& at) const {
  if (!at.consecutive) {
    return rope(layer).RotatePairs(z.unsqueeze(1), at::full({1}, at.pos, at::kLong), planes)
        .squeeze(1);
  }
  const auto positions = at::arange(at.pos, at.pos + z.size(0), at::kLong);
  return rope(layer).RotatePairs(z.unsqueeze(0), positions, planes).squeeze(0);
}

at::Tensor DecodeEngine::AttendRows(int64_t layer, const at::Tensor& q,
                                    const RowPositions& at) {
  if (!at.consecutive) return Attend(layer, q, at.pos);
  std::vector<at::Tensor> rows;
  for (int64_t t = 0; t < q.size(0); ++t) {
    rows.push_back(Attend(layer, q.narrow(0, t, 1), at.pos + t));
  }
  return at::cat(rows, 0);
}

void DecodeEngine::Reserve(int64_t positions) {
  while (length_ + positions > capacity_) {
    for (at::Tensor* t : CacheTensors()) {
      *t = at::cat({*t, at::zeros_like(*t)}, 1);
    }
    capacity_ *= 2;
  }
}

CacheMeasurement DecodeEngine::MeasureCache() const {
  CacheMeasurement m;
  m.tokens = length_;
  for (at::Tensor* t : const_cast<DecodeEngine*>(this)->CacheTensors()) {
    const int64_t bytes = t->numel() * static_cast<int64_t>(t->element_size());
    m.allocated_bytes += bytes;
    m.used_bytes += bytes / capacity_ * length_;
  }
  return m;
}

namespace {

// The rows of one layer's input that a batched step's slots share (SlotLinear), and the
// products already computed with them; set on this thread around each slot's Append.
struct SharedRows {
  // A product's identity: the weight, the bias, the weight's rows (a reshaped
  // view shares its data pointer).
  struct Key {
    const void* w;
    const void* b;
    int64_t rows;
    bool operator==(const Key& o) const {
      return w == o.w && b == o.b && rows == o.rows;
    }
  };
  at::Tensor all;             // [rows, d]
  int64_t row = 0, rows = 0;  // the slot now appending
  std::vector<std::pair<Key, at::Tensor>> products;
};
thread_local SharedRows* shared_rows = nullptr;

}  // namespace

at::Tensor DecodeEngine::SlotLinear(const at::Tensor& x, const at::Tensor& w,
                                    const at::Tensor& b) {
  SharedRows* r = shared_rows;
  if (r == nullptr || x.dim() != 2 || x.size(0) != r->rows ||
      x.data_ptr() != r->all.narrow(0, r->row, r->rows).data_ptr()) {
    return Linear(x, w, b);
  }
  const SharedRows::Key key{w.data_ptr(), b.defined() ? b.data_ptr() : nullptr,
                            w.size(0)};
  for (const auto& [k, product] : r->products) {
    if (k == key) return product.narrow(0, r->row, r->rows);
  }
  r->products.emplace_back(key, Linear(r->all, w, b));
  return r->products.back().second.narrow(0, r->row, r->rows);
}

at::Tensor DecodeEngine::RunLayers(const std::vector<Slot>& slots, at::Tensor x) {
  // Every slot's engine decodes this model in this compute dtype with the same stored
  // matrices and the same norm values (ForCompute of one model): the first's apply to
  // all rows.
  const DecodeEngine& first = *slots[0].engine;
  const ModelConfig& c = first.config_;
  const int64_t rows = x.size(0);
  for (const Slot& s : slots) s.engine->attention_.resize(first.weights_.layers.size());
  for (size_t i = 0; i < first.weights_.layers.size(); ++i) {
    const auto layer = static_cast<int64_t>(i);
    const LayerWeights& l = first.weights_.layers[i];
    auto h = AttentionInput(c, l, x);
    auto q = Linear(h, l.wq, l.bq).view({rows, c.num_heads, c.head_dim});
    if (c.qk_norm) q = QkNorm(c, q, l.q_norm);
    if (c.kv.DecoupledRope()) {
      q = at::cat({q, Linear(h, l.q_rope, l.bq_rope).view({rows, c.num_heads, -1})}, -1);
    }
    x = AddAttention(c, l, x, AttendSlots(slots, layer, h, q));
    x = AddFeedForward(c, l, x);
  }
  return RmsNorm(x, first.weights_.final_norm, c.rms_norm_eps);
}

at::Tensor DecodeEngine::AttendSlots(const std::vector<Slot>& slots,
                                     int64_t layer, const at::Tensor& h,
                                     const at::Tensor& q) {
  const auto i = static_cast<size_t>(layer);
  SharedRows shared{h, 0, 0, {}};
  auto append = [&](const Slot& s) {
    shared.row = s.row;
    shared.rows = s.rows;
    shared_rows = slots.size() > 1 ? &shared : nullptr;
    s.engine->Append(layer, h.narrow(0, s.row, s.rows), {s.pos, s.consecutive});
    shared_rows = nullptr;
  };
  // A step of separate sequences, one row each: every cache entry (computed for
  // all rows at once where the scheme can), then every query in one call where
  // the scheme has one.
  bool single_rows = slots.size() > 1;
  for (const Slot& s : slots) single_rows = single_rows && s.rows == 1;
  if (single_rows) {
    std::vector<DecodeEngine*> engines;
    std::vector<int64_t> positions;
    for (const Slot& s : slots) {
      engines.push_back(s.engine);
      positions.push_back(s.pos);
    }
    if (!slots[0].engine->AppendTogether(layer, engines, h, positions)) {
      for (const Slot& s : slots) append(s);
    }
    const at::Tensor all =
        slots[0].engine->AttendTogether(layer, engines, q, positions);
    if (all.defined()) {
      const at::Tensor rows = all.reshape({q.size(0), -1});
      for (const Slot& s : slots)
        s.engine->attention_[i] = rows.narrow(0, s.row, 1);
      return rows;
    }
  }
  // Each slot's cache entry (unless written above), then its query over the
  // positions up to its own: in slot order, which for a prefill is causal, as
  // single steps would be.
  std::vector<at::Tensor> outputs;
  outputs.reserve(slots.size());
  for (const Slot& s : slots) {
    if (!single_rows) append(s);
    at::Tensor attn = s.engine
                          ->AttendRows(layer, q.narrow(0, s.row, s.rows),
                                       {s.pos, s.consecutive})
                          .reshape({s.rows, -1});
    s.engine->attention_[i] =
        s.consecutive ? attn.narrow(0, s.rows - 1, 1) : attn;
    outputs.push_back(std::move(attn));
  }
  return outputs.size() == 1 ? outputs[0] : at::cat(outputs, 0);
}

at::Tensor DecodeEngine::Step(const at::Tensor& tokens) {
  Reserve(1);
  const auto x = RunLayers({{this, length_, 0, tokens.size(0)}},
                           Embed(weights_.embed, tokens, compute_dtype()));  // [B, d]
  ++length_;
  return Linear(x, weights_.lm_head);
}

at::Tensor DecodeEngine::Prefill(const at::Tensor& tokens) {
  const int64_t n = tokens.size(0);
  TORCH_CHECK(n >= 1 && options_.batch == 1, "Prefill takes >= 1 tokens of one sequence");
  Reserve(n);
  // In chunks of kPrefillChunk tokens through all layers: each chunk's temporaries (a
  // [chunk, d_ff] activation is 16 MB at the 1B shape) stay below glibc's mmap
  // threshold, where whole-context ones were mapped, faulted in and unmapped per use
  // (35 % of a 2048-token prefill's time in the kernel); GEMMs of 512 rows run at full
  // speed.
  at::Tensor x;
  for (int64_t t0 = 0; t0 < n; t0 += kPrefillChunk) {
    const int64_t m = std::min(kPrefillChunk, n - t0);
    const std::vector<Slot> slots = {{this, length_, 0, m, /*consecutive=*/true}};
    x = RunLayers(slots, Embed(weights_.embed, tokens.narrow(0, t0, m), compute_dtype()));
    length_ += m;
  }
  return Linear(x.narrow(0, x.size(0) - 1, 1), weights_.lm_head);
}

bool DecodeEngine::SharesWeightsWith(const DecodeEngine& e) const {
  const LlamaWeights &a = e.weights_, &b = weights_;
  if (e.options_.batch != 1 || options_.batch != 1 ||
      e.compute_dtype() != compute_dtype() ||
      a.embed.data_ptr() != b.embed.data_ptr() ||
      a.lm_head.data_ptr() != b.lm_head.data_ptr() ||
      a.layers.size() != b.layers.size()) {
    return false;
  }
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const LayerWeights &x = a.layers[i], &y = b.layers[i];
    if (x.wq.data_ptr() != y.wq.data_ptr() ||
        x.wo.data_ptr() != y.wo.data_ptr() ||
        x.w_gate.data_ptr() != y.w_gate.data_ptr() ||
        x.w_up.data_ptr() != y.w_up.data_ptr() ||
        x.w_down.data_ptr() != y.w_down.data_ptr()) {
      return false;
    }
  }
  return true;
}

std::vector<at::Tensor> DecodeEngine::StepTogether(const std::vector<DecodeEngine*>& engines,
                                                   int32_t token) {
  std::vector<BatchEntry> entries;
  for (DecodeEngine* e : engines) entries.push_back({e, {token}});
  return StepBatch(entries);
}

std::vector<at::Tensor> DecodeEngine::StepBatch(
    const std::vector<BatchEntry>& entries) {
  std::vector<at::Tensor> logits;
  if (entries.empty()) return logits;
  const DecodeEngine& first = *entries[0].engine;
  bool together = true;
  for (const BatchEntry& e : entries) {
    TORCH_CHECK(!e.tokens.empty(), "a batch entry appends at least one token");
    together = together && first.SharesWeightsWith(*e.engine);
  }
  if (!together && entries.size() > 1) {
    for (const BatchEntry& e : entries) logits.push_back(StepBatch({e})[0]);
    return logits;
  }
  if (!together) {  // one engine of batch B > 1: its B rows at one position
    TORCH_CHECK(!entries[0].all_logits,
                "all_logits needs an engine of batch 1");
    return {entries[0].engine->Step(at::tensor(entries[0].tokens, at::kLong))};
  }
  // Entry e's rows are rows [row, row + n_e) of the stacked hidden state.
  std::vector<Slot> slots;
  std::vector<int64_t> ids;
  for (const BatchEntry& e : entries) {
    const auto n = static_cast<int64_t>(e.tokens.size());
    e.engine->Reserve(n);
    slots.push_back({e.engine, e.engine->length_,
                     static_cast<int64_t>(ids.size()), n,
                     /*consecutive=*/n > 1});
    ids.insert(ids.end(), e.tokens.begin(), e.tokens.end());
  }
  const auto x =
      RunLayers(slots, Embed(first.weights_.embed, at::tensor(ids, at::kLong),
                             first.compute_dtype()));
  // Only each entry's last row reaches the head, or all its rows with
  // all_logits.
  std::vector<int64_t> heads, first_head;
  for (size_t e = 0; e < slots.size(); ++e) {
    const Slot& s = slots[e];
    first_head.push_back(static_cast<int64_t>(heads.size()));
    for (int64_t r = entries[e].all_logits ? 0 : s.rows - 1; r < s.rows; ++r) {
      heads.push_back(s.row + r);
    }
  }
  const bool every_row = static_cast<int64_t>(heads.size()) == x.size(0);
  const auto all =
      Linear(every_row ? x : x.index_select(0, at::tensor(heads, at::kLong)),
             first.weights_.lm_head);
  for (size_t e = 0; e < slots.size(); ++e) {
    slots[e].engine->length_ += slots[e].rows;
    logits.push_back(all.narrow(0, first_head[e],
                                entries[e].all_logits ? slots[e].rows : 1));
  }
  return logits;
}

absl::StatusOr<std::unique_ptr<DecodeEngine>> CreateDecodeEngine(
    const ModelConfig& config, const LlamaWeights& weights, DecodeMode mode,
    const EngineOptions& options) {
  if (options.cache_dtype == at::kDouble) {
    // The float64 engines of the error model (verify/equivalence.h): float64
    // weights, and ATen for the expanded one (its kernel is fp32).
    if (mode == DecodeMode::kExpanded && !options.materialize) {
      return absl::InvalidArgumentError(
          "a float64 cache needs the materialised ATen path (the expanded kernel is fp32)");
    }
  } else if (options.cache_dtype != at::kFloat &&
             options.cache_dtype != at::kBFloat16) {
    return absl::InvalidArgumentError("cache dtype must be fp32 or bf16");
  }
  if (options.cache_blocks && ((options.cache_blocks != DType::kQ8_0 &&
                                options.cache_blocks != DType::kQ4_0) ||
                               (options.cache_dtype != at::kFloat &&
                                options.cache_dtype != at::kDouble))) {
    return absl::InvalidArgumentError(
        "a block-quantized cache is Q8_0 or Q4_0, with fp32 scales (float64 in "
        "the error model's reference engines)");
  }
  // A cached row that is not whole blocks is refused while the engine
  // allocates its cache (NewCache).
  try {
    if (mode == DecodeMode::kExpanded)
      return MakeExpandedEngine(config, weights, options);
    return KvLayoutTypeOf(config.kv.layout)
        .MakeEngine(config, weights, mode, options);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  }
}

}  // namespace lrkv
