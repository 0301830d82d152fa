// Entry points, validation and naive references of the decode kernels.
#include "kernels/decode_attention.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/block_quant.h"
#include "kernels/cache_layout.h"

namespace lrkv::kernels {
namespace avx512 {
void MhaDecodeImpl(const MhaDecodeParams& p);
void FactoredDecodeImpl(const FactoredDecodeParams& p);
}  // namespace avx512
namespace avx2 {
void MhaDecodeImpl(const MhaDecodeParams& p);
void FactoredDecodeImpl(const FactoredDecodeParams& p);
}  // namespace avx2
namespace generic {
void MhaDecodeImpl(const MhaDecodeParams& p);
void FactoredDecodeImpl(const FactoredDecodeParams& p);
}  // namespace generic
namespace avx512bf16 {
void FactoredTiledImpl(const FactoredDecodeParams& p);
}  // namespace avx512bf16

namespace {

std::string forced_isa;

// The best implementation this CPU runs, unless a test forces a lesser one.
std::string Isa() {
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                             __builtin_cpu_supports("avx512bw");
  if (forced_isa == "generic" || !avx2) return "generic";
  if (forced_isa == "avx2" || !avx512) return "avx2";
  return "avx512";
}

double Element(const void* base, CacheDType t, int64_t i) {
  if (IsBlockQuantized(t)) {
    // The naive dequantization of base/block_quant.h, a block at a time.
    const auto* block = static_cast<const uint8_t*>(base) +
                        CacheBytes(t, i / kQuantBlock * kQuantBlock);
    float values[kQuantBlock];
    DequantizeBlocks(t == CacheDType::kQ8_0 ? DType::kQ8_0 : DType::kQ4_0,
                     block, kQuantBlock, values);
    return values[i % kQuantBlock];
  }
  if (t == CacheDType::kF32) return static_cast<const float*>(base)[i];
  uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(base)[i])
                  << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Softmax-weighted sums for one head: weights from scores, then out = Σ w·row.
std::vector<double> Softmax(const std::vector<double>& scores) {
  double m = -INFINITY;
  for (double s : scores) m = std::max(m, s);
  std::vector<double> w(scores.size());
  double sum = 0;
  for (size_t i = 0; i < scores.size(); ++i)
    sum += (w[i] = std::exp(scores[i] - m));
  for (double& x : w) x /= sum;
  return w;
}

absl::Status Invalid(const std::string& m) {
  return absl::InvalidArgumentError(m);
}

const char* QuantName(CacheDType t) {
  return t == CacheDType::kQ8_0 ? "Q8_0" : "Q4_0";
}

// A block-quantized cache's rows hold whole blocks: each named width (and
// stride) a multiple of kQuantBlock.
absl::Status CheckBlockWidths(
    const char* kernel, CacheDType t,
    std::initializer_list<std::pair<const char*, int64_t>> widths) {
  if (!IsBlockQuantized(t)) return absl::OkStatus();
  for (const auto& [name, width] : widths) {
    if (width % kQuantBlock != 0) {
      return Invalid(absl::StrCat(
          kernel, ": a ", QuantName(t), " cache stores blocks of ", kQuantBlock,
          " values, which do not divide the ", name, " of ", width));
    }
  }
  return absl::OkStatus();
}

// Runs the row-layout kernel of `isa` on p.
void FactoredRows(const std::string& isa, const FactoredDecodeParams& p) {
  if (isa == "avx512") {
    avx512::FactoredDecodeImpl(p);
  } else if (isa == "avx2") {
    avx2::FactoredDecodeImpl(p);
  } else {
    generic::FactoredDecodeImpl(p);
  }
}

// A tiled cache where no tiled implementation runs (no AVX512-BF16, a lesser
// ISA forced, or reconstruct mode): copy the segments into rows and run the
// row kernel. It reads the cache twice, so it is the correct path, not the
// fast one.
void FactoredTilesViaRows(const std::string& isa,
                          const FactoredDecodeParams& p) {
  const int64_t es = CacheDTypeSize(p.dtype);
  const int64_t latent = p.kv_heads * p.rank;
  // Only the tiles that hold the first `length` positions of each sequence
  // are converted; the rest of each copy is never read (left uninitialised).
  const int64_t used = (p.length + kCacheTile - 1) / kCacheTile * kCacheTile;
  std::vector<std::unique_ptr<char[]>> copies;
  auto rows = [&](const CacheSegment& s, bool key, int64_t width) {
    if (width == 0) return s;
    copies.emplace_back(new char[p.batch * p.capacity * width * es]);
    char* out = copies.back().get();
    for (int64_t b = 0; b < p.batch; ++b) {
      TilesToRows(
          p.dtype, key, used, width, s.stride, width,
          static_cast<const char*>(s.data) + b * p.capacity * s.stride * es,
          out + b * p.capacity * width * es);
    }
    return CacheSegment{out, width};
  };
  FactoredDecodeParams q = p;
  q.layout = CacheLayout::kRows;
  q.k = rows(p.k, true, p.dim);
  q.v = rows(p.v, false, p.dim);
  q.zk = rows(p.zk, true, latent);
  q.zv = rows(p.zv, false, latent);
  FactoredRows(isa, q);
}

}  // namespace

bool TiledKernelAvailable() {
  static const bool bf16 = __builtin_cpu_supports("avx512bf16");
  return bf16 && Isa() == "avx512";
}

const char* KernelIsa() {
  const std::string isa = Isa();
  return isa == "avx512" ? "avx512" : isa == "avx2" ? "avx2" : "generic";
}

void ForceKernelIsa(const std::string& isa) { forced_isa = isa; }

absl::Status ValidateMha(const MhaDecodeParams& p) {
  if (p.batch < 1 || p.heads < 1 || p.kv_heads < 1 || p.head_dim < 1 ||
      p.heads % p.kv_heads != 0 || p.heads / p.kv_heads > 64) {
    return Invalid(absl::StrCat("MHA decode: bad shape (batch ", p.batch,
                                ", heads ", p.heads, ", kv heads ", p.kv_heads,
                                ", head dim ", p.head_dim,
                                "); kv heads must divide heads, group <= 64"));
  }
  if (p.length < 1 || p.length > p.capacity) {
    return Invalid(absl::StrCat("MHA decode: length ", p.length,
                                " must lie in [1, capacity ", p.capacity, "]"));
  }
  if (!p.q || !p.out) return Invalid("MHA decode: missing buffer");
  if (auto st =
          CheckBlockWidths("MHA decode", p.dtype, {{"head dim", p.head_dim}});
      !st.ok())
    return st;
  const bool per_sequence = p.k_seqs || p.v_seqs || p.lengths;
  if (!per_sequence) {
    if (!p.k || !p.v) return Invalid("MHA decode: missing buffer");
    return absl::OkStatus();
  }
  if (!p.k_seqs || !p.v_seqs || !p.lengths || !p.position_major) {
    return Invalid(
        "MHA decode: per-sequence caches need k_seqs, v_seqs and lengths, "
        "position-major");
  }
  for (int64_t b = 0; b < p.batch; ++b) {
    if (!p.k_seqs[b] || !p.v_seqs[b])
      return Invalid(absl::StrCat("MHA decode: sequence ", b, " has no cache"));
    if (p.lengths[b] < 1 || p.lengths[b] > p.length) {
      return Invalid(absl::StrCat("MHA decode: sequence ", b, "'s length ",
                                  p.lengths[b], " must lie in [1, length ",
                                  p.length, "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFactored(const FactoredDecodeParams& p) {
  if (p.batch < 1 || p.heads < 1 || p.kv_heads < 1 || p.dim < 1 || p.rank < 0 ||
      p.heads % p.kv_heads != 0) {
    return Invalid(absl::StrCat("factored decode: bad shape (batch ", p.batch,
                                ", heads ", p.heads, ", kv heads ", p.kv_heads,
                                ", dim ", p.dim, ", rank ", p.rank, ")"));
  }
  if (p.length < 1 || p.length > p.capacity) {
    return Invalid(absl::StrCat("factored decode: length ", p.length,
                                " must lie in [1, capacity ", p.capacity, "]"));
  }
  const int64_t latent = p.kv_heads * p.rank;
  if (p.k.stride < p.dim || p.v.stride < p.dim ||
      (p.rank > 0 && (p.zk.stride < latent || p.zv.stride < latent))) {
    return Invalid(
        absl::StrCat("factored decode: a segment's stride is smaller than its "
                     "width (dim ",
                     p.dim, ", latents ", latent, ")"));
  }
  if (IsBlockQuantized(p.dtype)) {
    if (p.layout == CacheLayout::kTiles || p.up_k_t != nullptr) {
      return Invalid(absl::StrCat("factored decode: a ", QuantName(p.dtype),
                                  " cache has no tiled or reconstruct kernel"));
    }
    std::initializer_list<std::pair<const char*, int64_t>> widths = {
        {"shared width", p.dim},
        {"key stride", p.k.stride},
        {"value stride", p.v.stride}};
    if (auto st = CheckBlockWidths("factored decode", p.dtype, widths);
        !st.ok())
      return st;
    if (p.rank > 0) {
      if (auto st = CheckBlockWidths("factored decode", p.dtype,
                                     {{"latent width", latent},
                                      {"latent key stride", p.zk.stride},
                                      {"latent value stride", p.zv.stride}});
          !st.ok())
        return st;
    }
  }
  if (p.layout == CacheLayout::kTiles) {
    const int64_t lane = ElementsPerLane(p.dtype);
    if (p.capacity % kCacheTile != 0) {
      return Invalid(absl::StrCat(
          "factored decode: a tiled cache needs a capacity that is a multiple "
          "of ",
          kCacheTile, " (got ", p.capacity, ")"));
    }
    if (p.k.data == p.v.data) {
      return Invalid(
          "factored decode: a tiled cache cannot read one segment as both key "
          "and value (keys and values are tiled differently); use rows for "
          "absorbed MLA");
    }
    if (p.k.stride % lane != 0 || (p.rank > 0 && p.zk.stride % lane != 0)) {
      return Invalid(absl::StrCat(
          "factored decode: tiled bf16 key segments need even strides (k ",
          p.k.stride, ", zK ", p.zk.stride, ")"));
    }
  }
  const bool reconstruct = p.up_k_t != nullptr;
  if (!p.k.data || !p.v.data || (p.rank > 0 && (!p.zk.data || !p.zv.data)) ||
      !p.q || !p.out || (p.rank > 0 && !p.out_latent) ||
      (p.rank > 0 && !reconstruct && !p.q_latent) ||
      (reconstruct && (!p.rope_cos || !p.rope_sin || p.dim % 2 != 0))) {
    return Invalid("factored decode: missing buffer");
  }
  return absl::OkStatus();
}

absl::Status MhaDecode(const MhaDecodeParams& p) {
  if (auto st = ValidateMha(p); !st.ok()) return st;
  const std::string isa = Isa();
  if (isa == "avx512") {
    avx512::MhaDecodeImpl(p);
  } else if (isa == "avx2") {
    avx2::MhaDecodeImpl(p);
  } else {
    generic::MhaDecodeImpl(p);
  }
  return absl::OkStatus();
}

absl::Status FactoredDecode(const FactoredDecodeParams& p) {
  if (auto st = ValidateFactored(p); !st.ok()) return st;
  const std::string isa = Isa();
  if (p.layout == CacheLayout::kRows) {
    FactoredRows(isa, p);
  } else if (isa == "avx512" && TiledKernelAvailable() && p.up_k_t == nullptr) {
    avx512bf16::FactoredTiledImpl(p);
  } else {
    FactoredTilesViaRows(isa, p);
  }
  return absl::OkStatus();
}

absl::Status MhaDecodeReference(const MhaDecodeParams& p) {
  if (auto st = ValidateMha(p); !st.ok()) return st;
  const int64_t g = p.heads / p.kv_heads, dh = p.head_dim;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t base = p.Offset(0, h / g, 0), step = p.Offset(0, 0, 1);
      const int64_t length = p.LengthOf(b);
      const float* q = p.q + (b * p.heads + h) * dh;
      std::vector<double> scores(length);
      for (int64_t t = 0; t < length; ++t) {
        double s = 0;
        for (int64_t c = 0; c < dh; ++c)
          s += q[c] * Element(p.KeysOf(b), p.dtype, base + t * step + c);
        scores[t] = s * p.scale;
      }
      const auto w = Softmax(scores);
      for (int64_t c = 0; c < dh; ++c) {
        double o = 0;
        for (int64_t t = 0; t < length; ++t) {
          o += w[t] * Element(p.ValuesOf(b), p.dtype, base + t * step + c);
        }
        p.out[(b * p.heads + h) * dh + c] = static_cast<float>(o);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status FactoredDecodeReference(const FactoredDecodeParams& p) {
  if (auto st = ValidateFactored(p); !st.ok()) return st;
  const int64_t g = p.heads / p.kv_heads, n = p.dim, r = p.rank;
  // Element c of segment s at position t of sequence b.
  const int64_t lane = ElementsPerLane(p.dtype);
  auto at = [&](const CacheSegment& s, int64_t b, int64_t t, int64_t c) {
    const bool key = &s == &p.k || &s == &p.zk;
    return Element(
        s.data, p.dtype,
        SegmentOffset(p.layout, key, lane, s.stride, p.capacity, b, t, c));
  };
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t kvh = h / g;
      const float* q = p.q + (b * p.heads + h) * n;
      // Reconstruct mode has no latent query (q_latent null, rank > 0).
      const float* ql = r > 0 && p.q_latent != nullptr
                            ? p.q_latent + (b * p.heads + h) * r
                            : nullptr;
      std::vector<double> scores(p.length);
      for (int64_t t = 0; t < p.length; ++t) {
        double s = 0;
        for (int64_t c = 0; c < n; ++c) s += q[c] * at(p.k, b, t, c);
        if (p.up_k_t != nullptr && r > 0) {
          // Reconstruct: rebuild B_h z_t, rotate at position t, dot with q.
          std::vector<double> res(n, 0.0);
          for (int64_t j = 0; j < r; ++j) {
            const double z = at(p.zk, b, t, kvh * r + j);
            for (int64_t c = 0; c < n; ++c)
              res[c] += z * p.up_k_t[(kvh * r + j) * n + c];
          }
          for (int64_t c = 0; c < n / 2; ++c) {
            const double cs = p.rope_cos[t * (n / 2) + c],
                         sn = p.rope_sin[t * (n / 2) + c];
            s += q[2 * c] * (res[2 * c] * cs - res[2 * c + 1] * sn) +
                 q[2 * c + 1] * (res[2 * c] * sn + res[2 * c + 1] * cs);
          }
        } else {
          for (int64_t c = 0; c < r; ++c) {
            s += ql[c] * at(p.zk, b, t, kvh * r + c);
          }
        }
        const double sigma =
            p.sigma != nullptr
                ? p.sigma[(b * p.capacity + t) * p.kv_heads + kvh]
                : 1.0;
        scores[t] = s * sigma * p.scale;
      }
      const auto w = Softmax(scores);
      for (int64_t c = 0; c < n; ++c) {
        double o = 0;
        for (int64_t t = 0; t < p.length; ++t) {
          o += w[t] * at(p.v, b, t, c);
        }
        p.out[(b * p.heads + h) * n + c] = static_cast<float>(o);
      }
      for (int64_t c = 0; c < r; ++c) {
        double o = 0;
        for (int64_t t = 0; t < p.length; ++t) {
          o += w[t] * at(p.zv, b, t, kvh * r + c);
        }
        p.out_latent[(b * p.heads + h) * r + c] = static_cast<float>(o);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace lrkv::kernels
