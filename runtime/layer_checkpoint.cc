// Activation checkpointing of one layer (see layer_checkpoint.h).
#include "runtime/layer_checkpoint.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <memory>
#include <utility>

namespace lrkv {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The layer's function travels to the backward pass in the context, as a
// capsule.
struct LayerFn : torch::CustomClassHolder {
  std::function<at::Tensor(const at::Tensor&)> fn;
};

struct Checkpointed : torch::autograd::Function<Checkpointed> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            c10::intrusive_ptr<LayerFn> fn) {
    ctx->save_for_backward({x});
    ctx->saved_data["fn"] = c10::IValue::make_capsule(std::move(fn));
    return fn_of(ctx)->fn(x);  // autograd is off here: nothing inside is kept
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor y;
    {
      at::AutoGradMode with_grad(true);
      y = fn_of(ctx)->fn(x);
    }
    // Gradients of the layer's parameters accumulate into their .grad here; the
    // one of its input flows on to the layer below.
    torch::autograd::backward({y}, {grad_out[0]});
    return {x.grad(), at::Tensor()};
  }

  static LayerFn* fn_of(AutogradContext* ctx) {
    return static_cast<LayerFn*>(ctx->saved_data["fn"].toCapsule().get());
  }
};

}  // namespace

at::Tensor CheckpointedLayer(
    const std::function<at::Tensor(const at::Tensor&)>& layer,
    const at::Tensor& x) {
  if (!at::GradMode::is_enabled()) return layer(x);
  auto fn = c10::make_intrusive<LayerFn>();
  fn->fn = layer;
  // An input that needs no gradient (the first layer's, under a frozen
  // embedding) would leave the output without a grad_fn, and the layer's own
  // parameters without gradients: it is passed as a fresh leaf that asks for
  // one.
  return Checkpointed::apply(
      x.requires_grad() ? x : x.detach().requires_grad_(true), fn);
}

}  // namespace lrkv
