// oneDNN's bf16 matmul behind Bf16WeightGemm, its primitive cache and its reference.
#include "kernels/bf16_weight_gemm.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"

namespace lrkv::kernels {
namespace {

using Dt = dnnl::memory::data_type;
using Tag = dnnl::memory::format_tag;

// Made once per shape: creating a matmul primitive (its JIT kernels) costs ~0.6 ms,
// about 5 % of a 170-token product at the 1B shape. Prefill shapes repeat (a
// document's length times a few weight shapes), so a small cache keeps them.
class MatmulCache {
 public:
  struct Entry {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
  };

  static MatmulCache& Get() {
    static MatmulCache* cache = new MatmulCache();
    return *cache;
  }

  const dnnl::engine& engine() const { return engine_; }

  // Throws dnnl::error when oneDNN cannot make the primitive.
  std::shared_ptr<const Entry> Find(int64_t batch, int64_t rows, int64_t cols) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto key = std::make_tuple(batch, rows, cols);
    if (auto it = entries_.find(key); it != entries_.end()) return it->second;
    if (entries_.size() >= kCapacity) entries_.clear();
    // W [rows, cols] row-major is the [cols, rows] matrix in column-major ("ba") order.
    const dnnl::memory::desc x({batch, cols}, Dt::bf16, Tag::ab);
    const dnnl::memory::desc w({cols, rows}, Dt::bf16, Tag::ba);
    const dnnl::memory::desc y({batch, rows}, Dt::f32, Tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x, w, y), engine_);
    auto entry = std::make_shared<const Entry>(Entry{pd, dnnl::matmul(pd)});
    entries_.emplace(key, entry);
    return entry;
  }

 private:
  static constexpr size_t kCapacity = 256;
  MatmulCache() : engine_(dnnl::engine::kind::cpu, 0) {}

  dnnl::engine engine_;
  std::mutex mu_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::shared_ptr<const Entry>> entries_;
};

}  // namespace

absl::Status ValidateBf16WeightGemm(const Bf16WeightGemmParams& p) {
  if (p.rows <= 0 || p.cols <= 0 || p.batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("bf16 weight GEMM shape [", p.rows, ", ",
                                                   p.cols, "] x batch ", p.batch,
                                                   " must be positive"));
  }
  if (p.w == nullptr || p.x == nullptr || p.y == nullptr) {
    return absl::InvalidArgumentError("bf16 weight GEMM needs W, x and y");
  }
  return absl::OkStatus();
}

bool Bf16WeightGemmAvailable() {
  // The ISA values are masks, each including the ones below it.
  static const bool available = [] {
    const auto need = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    const auto have = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    return (have & need) == need;
  }();
  return available;
}

absl::Status Bf16WeightGemm(const Bf16WeightGemmParams& p) {
  if (auto s = ValidateBf16WeightGemm(p); !s.ok()) return s;
  if (!Bf16WeightGemmAvailable()) {
    return absl::FailedPreconditionError(
        "this CPU has no native bf16 matmul (AVX512-BF16 or AMX) for oneDNN");
  }
  const int64_t n = p.batch * p.cols;
  std::vector<uint16_t> xb(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) xb[i] = FloatToBFloat16(p.x[i]);
  try {
    MatmulCache& cache = MatmulCache::Get();
    const auto entry = cache.Find(p.batch, p.rows, p.cols);
    dnnl::memory x(entry->pd.src_desc(), cache.engine(), xb.data());
    dnnl::memory w(entry->pd.weights_desc(), cache.engine(), const_cast<uint16_t*>(p.w));
    dnnl::memory y(entry->pd.dst_desc(), cache.engine(), p.y);
    dnnl::stream stream(cache.engine());
    entry->primitive.execute(stream,
                             {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN bf16 matmul [", p.batch, ", ", p.cols,
                                            "] x [", p.rows, ", ", p.cols, "]ᵀ: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status Bf16WeightGemmReference(const Bf16WeightGemmParams& p) {
  if (auto s = ValidateBf16WeightGemm(p); !s.ok()) return s;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t o = 0; o < p.rows; ++o) {
      double s = 0;
      for (int64_t i = 0; i < p.cols; ++i) {
        s += static_cast<double>(BFloat16ToFloat(FloatToBFloat16(p.x[b * p.cols + i]))) *
             BFloat16ToFloat(p.w[o * p.cols + i]);
      }
      p.y[b * p.rows + o] = static_cast<float>(s);
    }
  }
  return absl::OkStatus();
}

}  // namespace lrkv::kernels
