// Exports MLA with decoupled RoPE and the latent norm as the GGUF file
// llama.cpp runs it from: architecture `deepseek2` (its only MLA), dense (every
// block a leading dense block, no experts, q_lora_rank 0), with the fused
// tensors convert_hf_to_gguf.py's DeepseekV2 writer produces:
//   attn_q         [H·(d_h + d_rope), d]  q_nope | q_rope per head (scaled so
//                                         llama.cpp's 1/sqrt(d_h + d_rope)
//                                         gives the source's 1/sqrt(d_h))
//   attn_kv_a_mqa  [d_c + d_rope, d]      latent | shared rotated key
//   attn_kv_a_norm [d_c]                  the latent's RMSNorm weight
//   attn_k_b       [H, d_c, d_h]          per query head, k_up transposed
//   attn_v_b       [H, d_h, d_c]          per query head, v_up
// and the metadata llama.cpp reads (attention.kv_lora_rank, key/value lengths
// of the absorbed MQA view d_c + d_rope / d_c, key_length_mla /
// value_length_mla d_h + d_rope / d_h, head_count_kv 1, rope.dimension_count
// d_rope). The rotated dims are already in llama.cpp's adjacent-pair order
// (pair m = dims 2m, 2m+1, DeepSeek's rope_interleave).
#ifndef LRKV_EXPORTS_DEEPSEEK_GGUF_EXPORT_H_
#define LRKV_EXPORTS_DEEPSEEK_GGUF_EXPORT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "formats/config.h"
#include "formats/gguf_writer.h"
#include "tokenizer/tokenizer.h"
#include "runtime/llama_weights.h"

namespace lrkv {

// InvalidArgument naming what of `config` llama.cpp's deepseek2 cannot run:
// no latent norm (it always applies one), attention biases, QK-norm, per-layer
// latents, NoPE layers, a sliding window, post-norm blocks; FailedPrecondition
// for kept RoPE planes whose frequencies no deepseek2 rotary reproduces.
absl::Status CheckDeepseekGgufExport(const ModelConfig& config);

// The deepseek2 GGUF of `weights` as a builder not yet written (`keep` owns the
// tensor data); the tokenizer as in GgufExportBuilder.
absl::StatusOr<GgufBuilder> DeepseekGgufBuilder(const ModelConfig& config,
                                                const LlamaWeights& weights,
                                                const Tokenizer& tokenizer,
                                                std::vector<at::Tensor>* keep,
                                                DType matrices);

}  // namespace lrkv

#endif  // LRKV_EXPORTS_DEEPSEEK_GGUF_EXPORT_H_
