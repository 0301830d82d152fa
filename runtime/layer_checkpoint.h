// Activation checkpointing for training: a decoder layer run so that autograd
// keeps only its input, not its activations; the backward pass runs the layer
// again with gradients and backpropagates through that second run
// (torch.utils.checkpoint's reentrant scheme). Training memory then holds one
// layer's activations instead of every layer's, for about one more forward pass
// of compute.
#ifndef LRKV_RUNTIME_LAYER_CHECKPOINT_H_
#define LRKV_RUNTIME_LAYER_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <functional>

namespace lrkv {

// layer(x) with only x saved for the backward pass. `layer` must compute the
// same function when run again (no randomness), and stays referenced until the
// backward has run. Without grad mode it is just layer(x).
at::Tensor CheckpointedLayer(
    const std::function<at::Tensor(const at::Tensor&)>& layer,
    const at::Tensor& x);

}  // namespace lrkv

#endif  // LRKV_RUNTIME_LAYER_CHECKPOINT_H_
