// Llama weights as ATen tensors: load, random init, RoPE layout permutation,
// save.
#include "runtime/llama_weights.h"

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <functional>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "runtime/deepseek_layout.h"
#include "runtime/kv_layout.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;

// Calls `fn(name, tensor*)` for every tensor slot `config` uses, in file order.
void ForEachSlot(const ModelConfig& c, LlamaWeights* w,
                 const std::function<void(const std::string&, at::Tensor*,
                                          std::vector<int64_t>)>& fn) {
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim,
                kv = c.num_kv_heads * c.head_dim, ff = c.intermediate_size;
  fn("model.embed_tokens.weight", &w->embed, {c.vocab_size, d});
  w->layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w->layers[i];
    if (!c.post_norm)
      fn(LayerTensorName(i, "input_layernorm.weight"), &l.attn_norm, {d});
    if (!c.deepseek_layout)
      fn(LayerTensorName(i, "self_attn.q_proj.weight"), &l.wq, {q, d});
    if (c.qkv_bias) fn(LayerTensorName(i, "self_attn.q_proj.bias"), &l.bq, {q});
    KvLayoutTypeOf(c.kv.layout).ForEachKvSlot(c, i, l, fn);
    if (c.qk_norm) {
      const int64_t qn = c.qk_norm_over_heads ? q : c.head_dim,
                    kn = c.qk_norm_over_heads ? kv : c.head_dim;
      fn(LayerTensorName(i, "self_attn.q_norm.weight"), &l.q_norm, {qn});
      fn(LayerTensorName(i, "self_attn.k_norm.weight"), &l.k_norm, {kn});
    }
    fn(LayerTensorName(i, "self_attn.o_proj.weight"), &l.wo, {d, q});
    if (c.post_norm) {  // OLMo-2: norms of the block outputs
      fn(LayerTensorName(i, "post_attention_layernorm.weight"), &l.attn_norm,
         {d});
      fn(LayerTensorName(i, "post_feedforward_layernorm.weight"), &l.ffn_norm,
         {d});
    } else {
      fn(LayerTensorName(i, "post_attention_layernorm.weight"), &l.ffn_norm,
         {d});
    }
    fn(LayerTensorName(i, "mlp.gate_proj.weight"), &l.w_gate, {ff, d});
    fn(LayerTensorName(i, "mlp.up_proj.weight"), &l.w_up, {ff, d});
    fn(LayerTensorName(i, "mlp.down_proj.weight"), &l.w_down, {d, ff});
  }
  fn("model.norm.weight", &w->final_norm, {d});
  if (!c.tie_word_embeddings)
    fn("lm_head.weight", &w->lm_head, {c.vocab_size, d});
}

bool IsIgnorableExtra(const std::string& name) {
  // Buffers some exporters store that the runtime recomputes.
  return name.find("rotary_emb.inv_freq") != std::string::npos ||
         name == "rope_freqs.weight";
}

// Source index (in layout `from`) of each destination dim (in layout `to`).
std::vector<int64_t> RopePermutation(int64_t head_dim, int64_t rope_dim,
                                     RopeLayout from, RopeLayout to) {
  std::vector<int64_t> perm(head_dim);
  const int64_t half = rope_dim / 2;
  for (int64_t j = 0; j < head_dim; ++j) perm[j] = j;
  if (from == to) return perm;
  for (int64_t i = 0; i < half; ++i) {
    if (to == RopeLayout::kHalfSplit) {  // from adjacent
      perm[i] = 2 * i;
      perm[i + half] = 2 * i + 1;
    } else {  // from half-split
      perm[2 * i] = i;
      perm[2 * i + 1] = i + half;
    }
  }
  return perm;
}

at::Tensor PermuteHeads(const at::Tensor& t, int64_t heads, int64_t head_dim,
                        const at::Tensor& index) {
  if (!t.defined() || t.numel() == 0) return t;
  auto shape = t.sizes().vec();
  auto v = t.reshape({heads, head_dim, -1}).index_select(1, index);
  return v.reshape(shape).contiguous();
}

}  // namespace

namespace {

at::ScalarType StoredScalar(DType dtype) {
  return dtype == DType::kF16    ? at::kHalf
         : dtype == DType::kBF16 ? at::kBFloat16
                                 : at::kFloat;
}

// `t` as stored in `dtype`: rounded to nearest even, once, from its value (a
// tensor already in `dtype` is used as it is, without a copy).
at::Tensor StoredTensor(const at::Tensor& t, DType dtype) {
  const at::ScalarType scalar = StoredScalar(dtype);
  at::Tensor cpu = t.detach().to(at::kCPU);
  if (cpu.scalar_type() != scalar) cpu = cpu.to(at::kFloat).to(scalar);
  return cpu.contiguous();
}

absl::Status CheckWrittenDType(DType matrices) {
  if (matrices == DType::kF32 || matrices == DType::kF16 ||
      matrices == DType::kBF16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "weights are written as F32, F16 or BF16, not ", DTypeName(matrices)));
}

// One tensor of a random model: norms ~1 + N(0, 0.1²), biases N(0, 0.1²), the
// rest N(0, 0.02²).
at::Tensor RandomWeight(const std::string& name,
                        const std::vector<int64_t>& shape, at::Generator& gen) {
  const at::Tensor t = at::randn(shape, gen, at::kFloat);
  if (name.find("norm") != std::string::npos) return 1.0 + 0.1 * t;
  if (name.find(".bias") != std::string::npos) return 0.1 * t;
  return 0.02 * t;
}

// `keep_alive` non-null: F32/F16/BF16 tensors become views of the mapped file
// that hold it alive; otherwise (and for block types) float32 copies.
absl::StatusOr<LlamaWeights> Load(
    const Checkpoint& ckpt, std::shared_ptr<const Checkpoint> keep_alive) {
  const ModelConfig& c = ckpt.config();
  LlamaWeights w;
  absl::Status status;
  std::set<std::string> used;
  ForEachSlot(
      c, &w,
      [&](const std::string& name, at::Tensor* slot,
          std::vector<int64_t> shape) {
        if (!status.ok()) return;
        const TensorView* t = ckpt.Find(name);
        if (t == nullptr) {
          status = absl::InvalidArgumentError(
              absl::StrCat(ckpt.path(), ": missing tensor '", name, "'"));
          return;
        }
        used.insert(name);
        if (t->shape != shape) {
          status = absl::InvalidArgumentError(
              absl::StrCat(ckpt.path(), ": tensor '", name, "' has shape ",
                           ShapeString(t->shape), ", expected ",
                           ShapeString(shape), " from the config"));
          return;
        }
        if (!IsFloatWeightDType(t->dtype)) {
          status = absl::InvalidArgumentError(absl::StrCat(
              ckpt.path(), ": tensor '", name, "' has dtype ",
              DTypeName(t->dtype), "; weights must be F32, F16 or BF16"));
          return;
        }
        const bool plain =
            DTypeSize(t->dtype) > 0;  // not a block-quantised type
        at::Tensor out;
        if (keep_alive != nullptr && plain) {
          // Read-only pages of the map: nothing may write to this tensor.
          out = at::from_blob(
              const_cast<uint8_t*>(t->data), shape,
              [keep = keep_alive](void*) {},
              at::TensorOptions().dtype(StoredScalar(t->dtype)));
        } else {
          out = at::empty(shape, at::kFloat);
          ConvertToFloat32(t->dtype, t->data, static_cast<size_t>(t->numel()),
                           out.data_ptr<float>());
        }
        // A NaN/Inf weight would make every comparison downstream false (and
        // verify read "max error 0"): refused here, naming the tensor.
        const NonFiniteCount bad =
            plain ? CountNonFinite(t->dtype, t->data,
                                   static_cast<size_t>(t->numel()))
                  : CountNonFinite(DType::kF32, out.data_ptr(),
                                   static_cast<size_t>(out.numel()));
        if (bad.nan + bad.inf > 0) {
          status = absl::InvalidArgumentError(
              absl::StrCat(ckpt.path(), ": tensor '", name, "' holds ", bad.nan,
                           " NaN and ", bad.inf, " infinite values"));
          return;
        }
        *slot = out;
      });
  RETURN_IF_ERROR(status);
  for (const auto& t : ckpt.tensors()) {
    if (used.count(t.name) == 0 && !IsIgnorableExtra(t.name) &&
        !(c.tie_word_embeddings && t.name == "lm_head.weight")) {
      return absl::InvalidArgumentError(absl::StrCat(
          ckpt.path(), ": unexpected tensor '", t.name, "' (not part of a ",
          c.model_type, " model with this config)"));
    }
  }
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  if (c.deepseek_layout) RETURN_IF_ERROR(UnfuseDeepseekAttention(c, &w));
  return w;
}

}  // namespace

absl::StatusOr<LlamaWeights> LoadLlamaWeights(const Checkpoint& ckpt) {
  return Load(ckpt, nullptr);
}

absl::StatusOr<LlamaWeights> LoadLlamaWeights(
    std::shared_ptr<const Checkpoint> ckpt, const WeightLoadOptions& options) {
  const Checkpoint& c = *ckpt;
  return Load(c, options.stored_dtype ? std::move(ckpt) : nullptr);
}

DType StoredMatrixDType(const LlamaWeights& w) {
  switch (w.embed.scalar_type()) {
    case at::kHalf:
      return DType::kF16;
    case at::kBFloat16:
      return DType::kBF16;
    default:
      return DType::kF32;
  }
}

LlamaWeights RandomLlamaWeights(const ModelConfig& c, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  LlamaWeights w;
  ForEachSlot(c, &w,
              [&](const std::string& name, at::Tensor* slot,
                  std::vector<int64_t> shape) {
                *slot = RandomWeight(name, shape, gen);
              });
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  return w;
}

absl::Status WriteRandomWeights(const std::string& dir, const ModelConfig& c,
                                uint64_t seed, DType matrices,
                                uint64_t max_shard_bytes) {
  RETURN_IF_ERROR(CheckWrittenDType(matrices));
  RETURN_IF_ERROR(c.Validate());
  std::vector<TensorSpec> specs;
  LlamaWeights unused;
  ForEachSlot(
      c, &unused,
      [&](const std::string& name, at::Tensor*, std::vector<int64_t> shape) {
        specs.push_back(
            {name, shape.size() >= 2 ? matrices : DType::kF32, shape});
      });
  SafetensorsShardOptions shard_options;
  shard_options.max_shard_bytes = max_shard_bytes;
  ASSIGN_OR_RETURN(auto writer, SafetensorsCheckpointWriter::Create(
                                    dir, specs, shard_options));
  // One tensor at a time, as RandomLlamaWeights draws them: an 8B model is
  // written in the memory of its largest tensor.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const TensorSpec& spec : specs) {
    const at::Tensor t =
        StoredTensor(RandomWeight(spec.name, spec.shape, gen), spec.dtype);
    RETURN_IF_ERROR(
        writer->Write(spec.name, t.data_ptr(), t.numel() * t.element_size()));
  }
  return writer->Finish();
}

void PermuteRopeLayout(ModelConfig* c, LlamaWeights* w, RopeLayout to) {
  if (c->rope_layout == to) return;
  const auto perm =
      RopePermutation(c->head_dim, c->rope_dim, c->rope_layout, to);
  const at::Tensor index = at::tensor(perm, at::kLong);
  for (auto& l : w->layers) {
    l.wq = PermuteHeads(l.wq, c->num_heads, c->head_dim, index);
    l.bq = PermuteHeads(l.bq, c->num_heads, c->head_dim, index);
    l.wk = PermuteHeads(l.wk, c->num_kv_heads, c->head_dim, index);
    l.bk = PermuteHeads(l.bk, c->num_kv_heads, c->head_dim, index);
    l.k_up = PermuteHeads(l.k_up, c->num_kv_heads, c->head_dim, index);
    if (l.k_lr.shared.defined()) {
      l.k_lr.shared = PermuteHeads(l.k_lr.shared, 1, c->head_dim, index);
      l.k_lr.shared_bias =
          PermuteHeads(l.k_lr.shared_bias, 1, c->head_dim, index);
      l.k_lr.up = PermuteHeads(l.k_lr.up, c->num_kv_heads, c->head_dim, index);
      l.k_lr.head_bias =
          PermuteHeads(l.k_lr.head_bias, c->num_kv_heads, c->head_dim, index);
    }
    if (c->qk_norm_over_heads) {  // one weight per coordinate of every head
      l.q_norm = PermuteHeads(l.q_norm, c->num_heads, c->head_dim, index);
      l.k_norm = PermuteHeads(l.k_norm, c->num_kv_heads, c->head_dim, index);
    } else {
      if (l.q_norm.defined())
        l.q_norm = l.q_norm.index_select(0, index).contiguous();
      if (l.k_norm.defined())
        l.k_norm = l.k_norm.index_select(0, index).contiguous();
    }
  }
  c->rope_layout = to;
}

namespace {

// Every tensor of `w` through `convert` (undefined ones stay undefined; tied
// embeddings stay tied).
template <typename Convert>
LlamaWeights MapWeights(const LlamaWeights& w, const Convert& convert) {
  auto move = [&](const at::Tensor& t) {
    return t.defined() ? convert(t.detach()) : t;
  };
  LlamaWeights out;
  out.embed = move(w.embed);
  out.final_norm = move(w.final_norm);
  out.lm_head = w.lm_head.is_same(w.embed) ? out.embed : move(w.lm_head);
  for (const auto& l : w.layers) {
    LayerWeights m;
    for (auto [dst, src] : {std::pair{&m.attn_norm, &l.attn_norm},
                            {&m.wq, &l.wq},
                            {&m.wo, &l.wo},
                            {&m.wk, &l.wk},
                            {&m.wv, &l.wv},
                            {&m.bq, &l.bq},
                            {&m.bk, &l.bk},
                            {&m.bv, &l.bv},
                            {&m.q_norm, &l.q_norm},
                            {&m.k_norm, &l.k_norm},
                            {&m.ffn_norm, &l.ffn_norm},
                            {&m.w_gate, &l.w_gate},
                            {&m.w_up, &l.w_up},
                            {&m.w_down, &l.w_down},
                            {&m.kv_down, &l.kv_down},
                            {&m.k_up, &l.k_up},
                            {&m.v_up, &l.v_up},
                            {&m.kv_norm, &l.kv_norm},
                            {&m.k_rope, &l.k_rope},
                            {&m.q_rope, &l.q_rope},
                            {&m.bk_rope, &l.bk_rope},
                            {&m.bq_rope, &l.bq_rope}}) {
      *dst = move(*src);
    }
    for (auto [dst, src] : {std::pair{&m.k_lr, &l.k_lr}, {&m.v_lr, &l.v_lr}}) {
      dst->shared = move(src->shared);
      dst->shared_bias = move(src->shared_bias);
      dst->down = move(src->down);
      dst->up = move(src->up);
      dst->head_bias = move(src->head_bias);
    }
    out.layers.push_back(std::move(m));
  }
  return out;
}

}  // namespace

LlamaWeights ToDevice(const LlamaWeights& w, at::Device device) {
  return MapWeights(w, [&](const at::Tensor& t) { return t.to(device); });
}

LlamaWeights ToDtype(const LlamaWeights& w, at::ScalarType dtype) {
  return MapWeights(w, [&](const at::Tensor& t) { return t.to(dtype); });
}

LlamaWeights ForCompute(const LlamaWeights& w, at::ScalarType dtype) {
  // The matrices Linear streams as stored, recognised by their data.
  std::set<const void*> streamed = {w.embed.data_ptr(), w.lm_head.data_ptr()};
  for (const LayerWeights& l : w.layers) {
    // A dense model's K/V too: a batched step's K/V product then streams them
    // through the same kernel instead of handing OpenBLAS a float32 copy it
    // packs again on every call (17 % of a batch-8 step of the Qwen3-0.6B
    // shape).
    // And a converted model's projections down from x (LRKV's shared and
    // down matrices, MLA's kv_down and decoupled-RoPE projections), which the
    // engines too use only through Linear; their up-projections enter einsums
    // and are converted.
    for (const at::Tensor* t :
         {&l.wq, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.wk, &l.wv,
          &l.k_lr.shared, &l.k_lr.down, &l.v_lr.shared, &l.v_lr.down,
          &l.kv_down, &l.k_rope, &l.q_rope}) {
      // (An empty factor, rank 0, has no data: nothing to stream.)
      if (t->defined() && t->numel() > 0) streamed.insert(t->data_ptr());
    }
  }
  return MapWeights(w, [&](const at::Tensor& t) {
    return streamed.count(t.data_ptr()) > 0 ? t : t.to(dtype);
  });
}

DenseKv ExpandKv(const ModelConfig& c, const LayerWeights& l) {
  return KvLayoutTypeOf(c.kv.layout).Expand(c, l);
}

namespace {

// Calls fn(name, dtype, shape, tensor) for every tensor `c`'s layout stores, in
// file order: matrices in `matrices`, vectors in F32. InvalidArgument for a
// missing or misshaped one.
absl::Status ForEachStoredWeight(
    const ModelConfig& c, const LlamaWeights& weights, DType matrices,
    const std::function<absl::Status(const std::string&, DType,
                                     const std::vector<int64_t>&,
                                     const at::Tensor&)>& fn) {
  RETURN_IF_ERROR(CheckWrittenDType(matrices));
  LlamaWeights w = weights;
  absl::Status status;
  ForEachSlot(c, &w,
              [&](const std::string& name, at::Tensor* slot,
                  std::vector<int64_t> shape) {
                if (!status.ok()) return;
                if (!slot->defined() || slot->sizes().vec() != shape) {
                  status = absl::InvalidArgumentError(absl::StrCat(
                      "tensor '", name, "' is missing or has the wrong shape"));
                  return;
                }
                status = fn(name, shape.size() >= 2 ? matrices : DType::kF32,
                            shape, *slot);
              });
  return status;
}

}  // namespace

absl::StatusOr<std::vector<TensorView>> WeightViews(
    const ModelConfig& c, const LlamaWeights& weights,
    std::vector<at::Tensor>* keep, DType matrices) {
  std::vector<TensorView> views;
  RETURN_IF_ERROR(ForEachStoredWeight(
      c, weights, matrices,
      [&](const std::string& name, DType dtype,
          const std::vector<int64_t>& shape, const at::Tensor& slot) {
        at::Tensor t = StoredTensor(slot, dtype);
        keep->push_back(t);
        TensorView v;
        v.name = name;
        v.dtype = dtype;
        v.shape = shape;
        v.data = static_cast<const uint8_t*>(t.data_ptr());
        v.nbytes = t.numel() * static_cast<int64_t>(t.element_size());
        views.push_back(std::move(v));
        return absl::OkStatus();
      }));
  return views;
}

LlamaWeights MatricesIn(const ModelConfig& c, const LlamaWeights& weights,
                        DType matrices) {
  LlamaWeights w = weights;
  ForEachSlot(
      c, &w,
      [&](const std::string&, at::Tensor* slot, std::vector<int64_t> shape) {
        if (slot->defined() && shape.size() >= 2)
          *slot = StoredTensor(*slot, matrices);
      });
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  return w;
}

absl::Status SaveSafetensorsCheckpoint(const std::string& dir,
                                       const ModelConfig& config,
                                       const LlamaWeights& weights,
                                       const Tokenizer* tokenizer,
                                       DType matrices,
                                       uint64_t max_shard_bytes) {
  RETURN_IF_ERROR(config.Validate());
  ModelConfig c = config;
  c.deepseek_layout = false;  // written in this project's own layout
  LlamaWeights w = weights;
  PermuteRopeLayout(&c, &w, RopeLayout::kHalfSplit);
  RETURN_IF_ERROR(SaveSafetensorsWeights(dir, c, w, matrices, max_shard_bytes));
  RETURN_IF_ERROR(
      WriteFileAtomically((fs::path(dir) / kConfigFileName).string(),
                          ConfigToHfJson(c, TorchDTypeName(matrices))));
  return WriteTokenizerFiles(dir, tokenizer);
}

absl::Status WriteTokenizerFiles(const std::string& dir,
                                 const Tokenizer* tokenizer) {
  if (tokenizer != nullptr) {
    for (const TokenizerFile& f : tokenizer->Files()) {
      RETURN_IF_ERROR(
          WriteFileAtomically((fs::path(dir) / f.name).string(), f.contents));
    }
  }
  return absl::OkStatus();
}

absl::Status SaveSafetensorsWeights(const std::string& dir,
                                    const ModelConfig& c, const LlamaWeights& w,
                                    DType matrices, uint64_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat(dir, ": cannot create: ", ec.message()));
  }
  // Planned first (shard boundaries go in each shard's header), then streamed a
  // tensor at a time: only one converted tensor is ever held besides the model
  // itself.
  std::vector<TensorSpec> specs;
  RETURN_IF_ERROR(ForEachStoredWeight(
      c, w, matrices,
      [&](const std::string& name, DType dtype,
          const std::vector<int64_t>& shape, const at::Tensor&) {
        specs.push_back({name, dtype, shape});
        return absl::OkStatus();
      }));
  SafetensorsShardOptions shard_options;
  shard_options.max_shard_bytes = max_shard_bytes;
  ASSIGN_OR_RETURN(auto writer, SafetensorsCheckpointWriter::Create(
                                    dir, std::move(specs), shard_options));
  RETURN_IF_ERROR(ForEachStoredWeight(
      c, w, matrices,
      [&](const std::string& name, DType dtype, const std::vector<int64_t>&,
          const at::Tensor& slot) {
        const at::Tensor t = StoredTensor(slot, dtype);
        return writer->Write(name, t.data_ptr(), t.numel() * t.element_size());
      }));
  return writer->Finish();
}

}  // namespace lrkv
