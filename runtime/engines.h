// Constructors of the concrete decode engines (internal to runtime/; use
// CreateDecodeEngine).
#ifndef LRKV_RUNTIME_ENGINES_H_
#define LRKV_RUNTIME_ENGINES_H_

#include <memory>

#include "absl/status/statusor.h"
#include "runtime/decode_engine.h"

namespace lrkv {

std::unique_ptr<DecodeEngine> MakeExpandedEngine(const ModelConfig& config,
                                                 const LlamaWeights& weights,
                                                 const EngineOptions& options);
// `mode`: reconstruct, or partial for MLA with decoupled RoPE.
std::unique_ptr<DecodeEngine> MakeMlaEngine(const ModelConfig& config,
                                            const LlamaWeights& weights, DecodeMode mode,
                                            const EngineOptions& options);
absl::StatusOr<std::unique_ptr<DecodeEngine>> MakeSharedPlaneEngine(
    const ModelConfig& config, const LlamaWeights& weights, const EngineOptions& options);
absl::StatusOr<std::unique_ptr<DecodeEngine>> MakeLrkvEngine(const ModelConfig& config,
                                                             const LlamaWeights& weights,
                                                             DecodeMode mode,
                                                             const EngineOptions& options);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_ENGINES_H_
