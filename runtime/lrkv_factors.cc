#include "runtime/lrkv_factors.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lrkv {
namespace {

// row[c] += Σ_j lat[j] · up[j, c] over one head's up rows [r, dh], j in order.
// The runtime builds for baseline x86-64 (SSE2), where the value side around
// it (ValueResult) took 23-44 us a layer at the Qwen3-0.6B shape (16 heads,
// r = 46, d_h = 128; timers around the call, two runs at context 2048); a
// clone per vector width is chosen once at load. The AVX-512 clone contracts
// each product and sum into one FMA (one rounding fewer), so the sums differ
// by float32 roundings between CPUs, as the kernels' do.
__attribute__((target_clones("avx512f", "avx2", "default"))) void AddUpRow(
    const float* lat, const float* up, int64_t r, int64_t dh, float* row) {
  for (int64_t j = 0; j < r; ++j) {
    const float x = lat[j];
    const float* u = up + j * dh;
    for (int64_t c = 0; c < dh; ++c) row[c] += x * u[c];
  }
}

// a and b [rows, d] as one matrix where b's data follows a's in memory (same
// dtype and width, contiguous, no gradient); undefined otherwise. The view
// does not own the memory: a and b, held beside it, keep it alive.
at::Tensor AdjacentRows(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || a.dim() != 2 || b.dim() != 2 ||
      a.size(1) != b.size(1) || a.scalar_type() != b.scalar_type() ||
      !a.device().is_cpu() || !b.device().is_cpu() || !a.is_contiguous() ||
      !b.is_contiguous() || a.requires_grad() || b.requires_grad() ||
      static_cast<const char*>(a.data_ptr()) + a.nbytes() != b.data_ptr()) {
    return {};
  }
  return at::from_blob(a.data_ptr(), {a.size(0) + b.size(0), a.size(1)},
                       a.options());
}

}  // namespace

Factors FactorsOf(const LowRankProjection& p, int64_t hkv, int64_t dh) {
  const int64_t r = p.up.size(2), d = p.shared.size(1);
  return {p.shared,
          p.shared_bias,
          p.down.view({hkv, r, d}),
          p.up,
          p.head_bias.defined() ? p.head_bias.view({hkv, dh})
                                : at::zeros({hkv, dh}, p.up.options()),
          p.up.transpose(1, 2).contiguous(),
          AdjacentRows(p.shared, p.down)};
}

// A decode step's operands are a few kilobytes, where ATen's einsum cost
// about 60 us a call (permutes and a batched GEMM): 11 % of an 8-sequence
// plane step of the Qwen3-0.6B shape at context 96. So float32 CPU operands
// without gradients take one loop over up's rows (the same float32 products,
// summed over j in order); others the einsum, which autograd and the float64
// twins need.
at::Tensor UpProject(const at::Tensor& a, const Factors& f) {
  if (a.scalar_type() != at::kFloat || f.up_rows.scalar_type() != at::kFloat ||
      !a.device().is_cpu() || a.requires_grad() || f.up_rows.requires_grad()) {
    return at::einsum("bhgr,hdr->bhgd", {a, f.up});
  }
  const at::Tensor ac = a.contiguous();
  const int64_t groups = a.size(0) * a.size(1) * a.size(2), g = a.size(2),
                heads = a.size(1), r = a.size(3), dh = f.up_rows.size(2);
  at::Tensor out = at::zeros({a.size(0), heads, g, dh}, at::kFloat);
  const float* lat = ac.data_ptr<float>();
  const float* up = f.up_rows.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < groups; ++i) {
    AddUpRow(lat + i * r, up + (i / g) % heads * r * dh, r, dh, o + i * dh);
  }
  return out;
}

absl::Status PlaneStructure(const at::Tensor& up, const Rope& rope,
                            int64_t layer, at::Tensor* coords,
                            at::Tensor* planes) {
  const int64_t hkv = up.size(0), dh = up.size(1), r = up.size(2);
  if (r % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("plane mode needs an even rank, got ", r));
  }
  *coords = at::zeros({hkv, r}, at::kLong);
  *planes = at::zeros({hkv, r / 2}, at::kLong);
  const at::Tensor up_f32 =
      up.to(at::kFloat);  // 0 and 1 are exact in any dtype
  auto acc = up_f32.accessor<float, 3>();
  for (int64_t h = 0; h < hkv; ++h) {
    std::vector<int64_t> col(r, -1);
    for (int64_t j = 0; j < r; ++j) {
      for (int64_t c = 0; c < dh; ++c) {
        const float v = acc[h][c][j];
        if (v == 1.0f && col[j] < 0) {
          col[j] = c;
        } else if (v != 0.0f) {
          col[j] = -2;
        }
      }
      if (col[j] < 0) break;
    }
    for (int64_t m = 0; m < r / 2; ++m) {
      int64_t plane = -1;
      for (int64_t p = 0; p < rope.head_planes() && col[2 * m] >= 0; ++p) {
        if (rope.PlaneCoordinates(p) ==
            std::make_pair(col[2 * m], col[2 * m + 1]))
          plane = p;
      }
      if (plane < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", layer, " head ", h,
                         ": B_h is not a selection of whole RoPE planes "
                         "(convert with --rope-mode plane)"));
      }
      (*coords)[h][2 * m] = col[2 * m];
      (*coords)[h][2 * m + 1] = col[2 * m + 1];
      (*planes)[h][m] = plane;
    }
  }
  return absl::OkStatus();
}

bool FloatLoopsServe(std::initializer_list<at::Tensor> operands) {
  for (const at::Tensor& t : operands) {
    if (!t.defined() || t.scalar_type() != at::kFloat || !t.device().is_cpu() ||
        t.requires_grad() || !t.is_contiguous()) {
      return false;
    }
  }
  return true;
}

at::Tensor KeyNormScales(const at::Tensor& ks, const at::Tensor& zk,
                         const Factors& k, bool over_heads, double eps) {
  const int64_t n = ks.size(0), hkv = zk.size(1), r = zk.size(2),
                dh = ks.size(1);
  at::Tensor sigma = at::empty({n, over_heads ? 1 : hkv}, at::kFloat);
  const float* s = ks.data_ptr<float>();
  const float* z = zk.data_ptr<float>();
  const float* up = k.up_rows.data_ptr<float>();
  const float* delta = k.delta.data_ptr<float>();
  float* out = sigma.data_ptr<float>();
  std::vector<float> row(dh);
  auto scale = [&](double sum_of_squares, int64_t count) {
    const float mean = static_cast<float>(sum_of_squares / count);
    return 1.0f / std::sqrt(mean + static_cast<float>(eps));
  };
  for (int64_t i = 0; i < n; ++i) {
    double all = 0;
    for (int64_t h = 0; h < hkv; ++h) {
      std::fill(row.begin(), row.end(), 0.0f);
      AddUpRow(z + (i * hkv + h) * r, up + h * r * dh, r, dh, row.data());
      double sum = 0;
      for (int64_t c = 0; c < dh; ++c) {
        const float kc = (s[i * dh + c] + row[c]) + delta[h * dh + c];
        sum += kc * kc;
      }
      if (!over_heads) out[i * hkv + h] = scale(sum, dh);
      all += sum;
    }
    if (over_heads) out[i] = scale(all, hkv * dh);
  }
  return sigma;
}

at::Tensor ScaledLatents(const at::Tensor& z, const at::Tensor& bias,
                         const at::Tensor& gamma) {
  at::Tensor out = at::empty_like(z);
  const int64_t rows = z.size(0), per_row = bias.numel();
  const float* in = z.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  const float* g = gamma.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < per_row; ++j) {
      o[i * per_row + j] = (in[i * per_row + j] + b[j]) * g[j];
    }
  }
  return out;
}

at::Tensor QueryPlaneCoordinates(const at::Tensor& q,
                                 const at::Tensor& coords) {
  const int64_t n = q.size(0), heads = q.size(1), dh = q.size(2),
                hkv = coords.size(0), r = coords.size(1), g = heads / hkv;
  at::Tensor out = at::empty({n, heads, r}, at::kFloat);
  const float* in = q.data_ptr<float>();
  const int64_t* at = coords.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < n * heads; ++i) {
    const int64_t* c = at + (i % heads) / g * r;
    for (int64_t j = 0; j < r; ++j) o[i * r + j] = in[i * dh + c[j]];
  }
  return out;
}

at::Tensor ValueResult(const at::Tensor& out, const at::Tensor& latent,
                       const Factors& v) {
  const int64_t n = out.size(0), heads = out.size(1), dh = out.size(2),
                hkv = v.up_rows.size(0), r = latent.size(2), g = heads / hkv;
  at::Tensor result = at::empty({n, heads, dh}, at::kFloat);
  const float* a = out.data_ptr<float>();
  const float* lat = latent.data_ptr<float>();
  const float* up = v.up_rows.data_ptr<float>();
  const float* delta = v.delta.data_ptr<float>();
  float* o = result.data_ptr<float>();
  std::vector<float> row(dh);
  for (int64_t i = 0; i < n * heads; ++i) {
    const int64_t h = (i % heads) / g;
    std::fill(row.begin(), row.end(), 0.0f);
    AddUpRow(lat + i * r, up + h * r * dh, r, dh, row.data());
    for (int64_t c = 0; c < dh; ++c) {
      o[i * dh + c] = (a[i * dh + c] + row[c]) + delta[h * dh + c];
    }
  }
  return result;
}

}  // namespace lrkv
