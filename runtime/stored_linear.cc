// Small-batch products with stored-dtype weights (see stored_linear.h).
#include "runtime/stored_linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include "kernels/bf16_weight_gemm.h"
#include "kernels/weight_matvec.h"

namespace lrkv {
namespace {

thread_local bool bf16_products = false;

// x [batch, cols] times the bf16 w through oneDNN, or undefined when it fails.
at::Tensor Bf16Gemm(const at::Tensor& x, const at::Tensor& w) {
  const at::Tensor xc = x.contiguous();
  kernels::Bf16WeightGemmParams p;
  p.batch = x.numel() / x.size(-1);
  p.rows = w.size(0);
  p.cols = w.size(1);
  p.w = static_cast<const uint16_t*>(w.data_ptr());
  auto shape = x.sizes().vec();
  shape.back() = p.rows;
  at::Tensor y = at::empty(shape, x.options().memory_format(at::MemoryFormat::Contiguous));
  p.x = xc.data_ptr<float>();
  p.y = y.data_ptr<float>();
  if (!kernels::Bf16WeightGemm(p).ok()) return {};
  return y;
}

// The autograd node of FrozenStoredLinear: saves the stored weight (a view of the
// checkpoint's map, or a bf16 tensor), never its widened copy.
struct FrozenStoredLinearFunction : torch::autograd::Function<FrozenStoredLinearFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w) {
    ctx->saved_data["w"] = w;
    return at::linear(x, w.to(x.scalar_type()));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const at::Tensor w = ctx->saved_data["w"].toTensor();
    const at::Tensor& g = grads[0];
    return {at::matmul(g, w.to(g.scalar_type())), at::Tensor()};
  }
};

}  // namespace

Bf16ProductsScope::Bf16ProductsScope(bool enabled) : previous_(bf16_products) {
  bf16_products = enabled;
}
Bf16ProductsScope::~Bf16ProductsScope() { bf16_products = previous_; }
bool Bf16ProductsScope::Active() { return bf16_products; }
bool Bf16ProductsScope::Available() { return kernels::Bf16WeightGemmAvailable(); }

at::Tensor FrozenStoredLinear(const at::Tensor& x, const at::Tensor& w) {
  return FrozenStoredLinearFunction::apply(x, w);
}

at::Tensor StoredLinear(const at::Tensor& x, const at::Tensor& w) {
  const at::ScalarType xt = x.scalar_type(), wt = w.scalar_type();
  if (!x.device().is_cpu() || !w.device().is_cpu() || w.dim() != 2 || x.dim() < 1 ||
      x.size(-1) != w.size(1) || w.numel() == 0 || (xt != at::kFloat && xt != at::kDouble) ||
      x.requires_grad() || w.requires_grad() || !w.is_contiguous()) {
    return {};
  }
  kernels::WeightMatVecParams p;
  if (wt == at::kBFloat16) {
    p.dtype = kernels::WeightDType::kBF16;
  } else if (wt == at::kHalf) {
    p.dtype = kernels::WeightDType::kF16;
  } else if (wt == at::kFloat && xt == at::kDouble) {
    p.dtype = kernels::WeightDType::kF32;
  } else {
    return {};
  }
  p.batch = x.numel() / x.size(-1);
  if (p.batch < 1) return {};
  const bool bf16_x = bf16_products && wt == at::kBFloat16 &&
                      xt == at::kFloat && Bf16ProductsScope::Available();
  if (p.batch > kStoredLinearMaxRows)
    return bf16_x ? Bf16Gemm(x, w) : at::Tensor();
  // A batched decode step (2 to 16 rows) is compute-bound: inside the scope it
  // rounds the activations too, with the mat-vec kernel's bf16 dot product. One
  // row stays exact: a single sequence's decode is memory-bound either way.
  p.bf16_activations = bf16_x && p.batch >= 2;
  const at::Tensor xc = x.contiguous();
  p.rows = w.size(0);
  p.cols = w.size(1);
  p.w = w.data_ptr();
  auto shape = x.sizes().vec();
  shape.back() = p.rows;
  at::Tensor y = at::empty(shape, x.options().memory_format(at::MemoryFormat::Contiguous));
  if (xt == at::kDouble) {
    p.x64 = xc.data_ptr<double>();
    p.y64 = y.data_ptr<double>();
  } else {
    p.x = xc.data_ptr<float>();
    p.y = y.data_ptr<float>();
  }
  if (!kernels::WeightMatVec(p).ok()) return {};
  return y;
}

}  // namespace lrkv
