// The weights of a Llama-family decoder as float32 ATen tensors (PyTorch layout:
// projections are [out, in]), loaded from a Checkpoint with every shape checked,
// initialised at random for tests, permuted between RoPE layouts, and saved.
#ifndef LRKV_RUNTIME_LLAMA_WEIGHTS_H_
#define LRKV_RUNTIME_LLAMA_WEIGHTS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "formats/config.h"
#include "model/checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace lrkv {

// K or V of an LRKV layer: head h's projection is shared + up[h] · down_h, where
// down_h = down[h*r:(h+1)*r] (PyTorch [out, in] layout: W_hᵀ = Sᵀ + B_h U_hᵀ).
struct LowRankProjection {
  at::Tensor shared;       // [dh, d]   Sᵀ
  at::Tensor shared_bias;  // [dh]      mean of the source biases (with biases)
  at::Tensor down;         // [Hkv*r, d] U_hᵀ of every head, stacked
  at::Tensor up;           // [Hkv, dh, r] B_h
  at::Tensor head_bias;    // [Hkv*dh]  per-head deltas from the shared bias (with biases)
};

struct LayerWeights {
  at::Tensor attn_norm;           // [d] (post_norm: of the attention output)
  at::Tensor wq, wo;              // [H*dh, d], [d, H*dh]
  at::Tensor wk, wv;              // [Hkv*dh, d] (dense layout only)
  at::Tensor bq, bk, bv;          // undefined unless config.qkv_bias (bk/bv: dense, MLA)
  LowRankProjection k_lr, v_lr;   // LRKV layout only
  at::Tensor kv_down;             // [dc, d] MLA layout only: the joint latent
  at::Tensor k_up, v_up;          // [Hkv*dh, dc] MLA layout only
  at::Tensor kv_norm;             // [dc] MLA with kv.latent_norm: the latent's RMSNorm γ
  // MLA with decoupled RoPE (kv.DecoupledRope(), w = kv.RopeWidth()): the rotated key
  // every head shares and each query head's part against it, pair m turning with
  // RoPE plane m; bk then biases the RoPE-free key only.
  at::Tensor k_rope, q_rope;      // [w, d], [H*w, d]
  at::Tensor bk_rope, bq_rope;    // [w], [H*w]; qkv_bias only
  at::Tensor q_norm, k_norm;      // [dh] (OLMo-2: [H*dh], [Hkv*dh]); qk_norm only
  at::Tensor ffn_norm;            // [d]
  at::Tensor w_gate, w_up;        // [ff, d]
  at::Tensor w_down;              // [d, ff]
};

struct LlamaWeights {
  at::Tensor embed;       // [V, d]
  at::Tensor final_norm;  // [d]
  at::Tensor lm_head;     // [V, d]; shares storage with embed when tied
  std::vector<LayerWeights> layers;
};

// Loads and converts to float32 every tensor `config` needs. InvalidArgument names
// the tensor for a missing tensor, a wrong shape, a non-float dtype or an
// unexpected extra tensor.
absl::StatusOr<LlamaWeights> LoadLlamaWeights(const Checkpoint& checkpoint);

struct WeightLoadOptions {
  /// Keep F32/F16/BF16 tensors as read-only views of the checkpoint's memory map in
  /// their stored dtype: nothing is copied, pages are read when a layer is used, and
  /// the compute code converts a weight to its compute dtype on use (layers.h). The
  /// tensors keep the checkpoint alive; writing to them faults, so they are for
  /// inference and conversion, never for training. Block-quantised GGUF tensors are
  /// dequantised to float32 either way.
  bool stored_dtype = false;
};
absl::StatusOr<LlamaWeights> LoadLlamaWeights(std::shared_ptr<const Checkpoint> checkpoint,
                                              const WeightLoadOptions& options);
// The options of inference-only loads: weights left in the map, in their stored dtype.
inline WeightLoadOptions StoredDtype() {
  WeightLoadOptions o;
  o.stored_dtype = true;
  return o;
}

// The dtype the embedding matrix is held in (F32, F16 or BF16): a checkpoint's
// storage dtype when loaded with stored_dtype.
DType StoredMatrixDType(const LlamaWeights& weights);

// Random weights of the right shapes (normal, std 0.02 for projections, ~1 for
// norms), deterministic in `seed`.
LlamaWeights RandomLlamaWeights(const ModelConfig& config, uint64_t seed);

// Writes the safetensors files (HF names, shards past `max_shard_bytes`) of a model of
// `config` with weights drawn as RandomLlamaWeights draws them, one tensor at a time,
// matrices stored in `matrices`: random-weight checkpoints of real shapes (8B and up)
// in the memory of one tensor. config.json and tokenizer files are the caller's.
absl::Status WriteRandomWeights(const std::string& dir, const ModelConfig& config,
                                uint64_t seed, DType matrices,
                                uint64_t max_shard_bytes = 5'000'000'000);

// Re-expresses q/k projections (rows, biases, QK-norm scales) from config.rope_layout
// in `to`, so that the model computes the same function; updates config.rope_layout.
void PermuteRopeLayout(ModelConfig* config, LlamaWeights* weights, RopeLayout to);

// The same weights on `device` (tied embeddings stay tied); requires_grad is not kept.
LlamaWeights ToDevice(const LlamaWeights& weights, at::Device device);

// The same weights in `dtype` (verify's float64 reference engine).
LlamaWeights ToDtype(const LlamaWeights& weights, at::ScalarType dtype);

// The same weights for computing in `dtype` (float32, or float64 for verify's
// reference) without copying the model: every tensor but the matrices that
// only ever enter a product through Linear (embed, lm_head, wq, wo, FFN, a
// dense model's wk and wv, an LRKV model's shared and down matrices, an MLA
// model's kv_down and RoPE projections) is converted to `dtype` (norms,
// biases, the up-projections: a small fraction of the model); those keep their
// storage and are streamed by Linear's stored-weight path.
LlamaWeights ForCompute(const LlamaWeights& weights, at::ScalarType dtype);

// Materialises the dense per-KV-head K/V projections [Hkv*dh, d] (and biases [Hkv*dh],
// undefined without biases) of any layout. MLA with decoupled RoPE: wk is the RoPE-free
// key, and wk_rope [w, d] (bk_rope [w]) the rotated key every head shares.
struct DenseKv {
  at::Tensor wk, bk, wv, bv;
  at::Tensor wk_rope, bk_rope;
};
DenseKv ExpandKv(const ModelConfig& config, const LayerWeights& layer);

// Float32 views of every weight of `config`'s layout under its HF name ("model.layers.0.
// self_attn.q_proj.weight"); `keep` owns the data. InvalidArgument naming a missing or
// misshaped tensor.
// `matrices` (kF32, kF16 or kBF16) is the storage of every 2-D tensor; vectors (norms,
// biases) stay float32, as llama.cpp requires of norms.
absl::StatusOr<std::vector<TensorView>> WeightViews(const ModelConfig& config,
                                                   const LlamaWeights& weights,
                                                   std::vector<at::Tensor>* keep,
                                                   DType matrices = DType::kF32);

// The same weights with every matrix held as it would be stored in `matrices` (F32,
// F16 or BF16; rounded once to nearest even, no copy where it already is), vectors
// unchanged: what a conversion evaluates is then exactly what it writes.
LlamaWeights MatricesIn(const ModelConfig& config, const LlamaWeights& weights,
                        DType matrices);

// Writes config.json, model.safetensors (HF names; matrices in `matrices`, vectors in
// float32; torch_dtype says which) and, when given, the tokenizer into `dir` (created
// if needed). Adjacent-layout weights are permuted to the half-split layout HF
// loaders assume.
// Streamed a tensor at a time into HF shards of at most `max_shard_bytes`
// (model.safetensors.index.json) when the model is larger.
absl::Status SaveSafetensorsCheckpoint(const std::string& dir, const ModelConfig& config,
                                       const LlamaWeights& weights,
                                       const Tokenizer* tokenizer,
                                       DType matrices = DType::kF32,
                                       uint64_t max_shard_bytes = 5'000'000'000);
// The tensors of `config`'s layout alone (its slot names: the DeepSeek layout's where
// config.deepseek_layout), sharded as SaveSafetensorsCheckpoint shards them, no config
// or tokenizer; for writers of other layouts (deepseek_layout.h).
absl::Status SaveSafetensorsWeights(const std::string& dir, const ModelConfig& config,
                                    const LlamaWeights& weights, DType matrices,
                                    uint64_t max_shard_bytes);
// The tokenizer's files (none for a null tokenizer) into `dir`.
absl::Status WriteTokenizerFiles(const std::string& dir, const Tokenizer* tokenizer);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_LLAMA_WEIGHTS_H_
