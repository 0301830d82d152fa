// The decode kernels' implementation, compiled three times: with AVX-512
// (decode_avx512.cc), with AVX2/FMA (decode_avx2.cc) and for any x86-64
// (decode_generic.cc); the entry points pick one at run time. Flash-decoding:
// the positions of each sequence are split into chunks processed in parallel
// (OpenMP), each chunk walks tiles of positions with an online softmax, and the
// chunks' partial results are merged at the end. Include only from those files,
// after defining LRKV_KERNEL_NS.
#include <type_traits>

#include "kernels/decode_simd.h"
// After decode_simd.h, whose SIMD layer it uses.
#include "kernels/decode_mha_grouped.h"

namespace lrkv::kernels::LRKV_KERNEL_NS {
namespace {

// out[h] = q[h] · x for nh rows of q (stride n).
template <typename E>
inline void MultiDot(const float* q, int64_t nh, const E* x, int64_t n,
                     float* out) {
  int64_t h = 0;
#ifdef LRKV_KERNEL_SIMD
  const int64_t nv = n / kW * kW;
  for (; h + 4 <= nh; h += 4) {
    Vf a0 = VZero(), a1 = a0, a2 = a0, a3 = a0;
    const float *q0 = q + h * n, *q1 = q0 + n, *q2 = q1 + n, *q3 = q2 + n;
    for (int64_t c = 0; c < nv; c += kW) {
      const Vf xv = VLoad(x + c);
      a0 = VFma(VLoad(q0 + c), xv, a0);
      a1 = VFma(VLoad(q1 + c), xv, a1);
      a2 = VFma(VLoad(q2 + c), xv, a2);
      a3 = VFma(VLoad(q3 + c), xv, a3);
    }
    int64_t tail = nv;
#ifdef LRKV_KERNEL_MASKED_TAIL
    if (nv < n) {
      const int64_t m = n - nv;
      const Vf xv = VLoadN(x + nv, m);
      a0 = VFma(VLoadN(q0 + nv, m), xv, a0);
      a1 = VFma(VLoadN(q1 + nv, m), xv, a1);
      a2 = VFma(VLoadN(q2 + nv, m), xv, a2);
      a3 = VFma(VLoadN(q3 + nv, m), xv, a3);
      tail = n;
    }
#endif
    float s0 = VSum(a0), s1 = VSum(a1), s2 = VSum(a2), s3 = VSum(a3);
    for (int64_t c = tail; c < n; ++c) {
      const float xv = ToFloat(x[c]);
      s0 += q0[c] * xv;
      s1 += q1[c] * xv;
      s2 += q2[c] * xv;
      s3 += q3[c] * xv;
    }
    out[h] = s0;
    out[h + 1] = s1;
    out[h + 2] = s2;
    out[h + 3] = s3;
  }
  for (; h < nh; ++h) {
    const float* qh = q + h * n;
    Vf a0 = VZero(), a1 = a0;
    int64_t c = 0;
    for (; c + 2 * kW <= n; c += 2 * kW) {
      a0 = VFma(VLoad(qh + c), VLoad(x + c), a0);
      a1 = VFma(VLoad(qh + c + kW), VLoad(x + c + kW), a1);
    }
    for (; c + kW <= n; c += kW) a0 = VFma(VLoad(qh + c), VLoad(x + c), a0);
#ifdef LRKV_KERNEL_MASKED_TAIL
    if (c < n) {
      a1 = VFma(VLoadN(qh + c, n - c), VLoadN(x + c, n - c), a1);
      c = n;
    }
#endif
    float s = VSum(VAdd(a0, a1));
    for (; c < n; ++c) s += qh[c] * ToFloat(x[c]);
    out[h] = s;
  }
#endif
  for (; h < nh; ++h) {
    float s = 0;
    const float* qh = q + h * n;
    for (int64_t c = 0; c < n; ++c) s += qh[c] * ToFloat(x[c]);
    out[h] = s;
  }
}

#ifdef LRKV_KERNEL_SIMD
// out[h] = q[h] · x for NH ≤ kW rows of q (stride n), n a multiple of kW: one
// accumulator per row, all reduced together (MultiDot reduces each row on its
// own). NH and the lane count are compile-time so that the accumulators stay in
// registers.
template <int NH, typename E>
inline void MultiDotFixed(const float* q, const E* x, int64_t n, float* out) {
  Vf a[kW];
#pragma GCC unroll 16
  for (int h = 0; h < kW; ++h) a[h] = VZero();
  for (int64_t c = 0; c < n; c += kW) {
    const Vf xv = VLoad(x + c);
#pragma GCC unroll 16
    for (int h = 0; h < NH; ++h) a[h] = VFma(VLoad(q + h * n + c), xv, a[h]);
  }
  alignas(64) float sums[kW];
  VSumMany(a, sums);
  for (int h = 0; h < NH; ++h) out[h] = sums[h];
}

// MultiDotFixed for the head counts it is instantiated for; false otherwise.
template <typename E>
inline bool MultiDotWide(const float* q, int64_t nh, const E* x, int64_t n,
                         float* out) {
  if (n % kW != 0) return false;
  switch (nh) {
    case 4:
      MultiDotFixed<4>(q, x, n, out);
      return true;
    case 8:
      MultiDotFixed<8>(q, x, n, out);
      return true;
#if LRKV_KERNEL_SIMD == 16
    case 12:
      MultiDotFixed<12>(q, x, n, out);
      return true;
    case 16:
      MultiDotFixed<16>(q, x, n, out);
      return true;
#endif
    default:
      return false;
  }
}

// The queries of SharedAndLatentDots, packed so that a block's loop reads
// them from one pointer at constant offsets (with a pointer per head, GCC kept
// the kW pointers on the stack and reloaded one per multiply-add, which made
// the loop load-bound): per block of kW heads,
//  - shared: [n/kW vectors][kW heads][kW lanes];
//  - latent: [kW/g KV heads][vectors][g heads][kW lanes], where a KV head's
//    run of r is read as ceil(r/kW) vectors, the last one at [r − kW, r) with
//    the lanes the vector before already covers zeroed, so that a run that is
//    not a whole number of vectors ends in a plain load (0 · a cached element,
//    which is finite, adds nothing). Needs r >= kW.
struct PackedQueries {
  std::vector<float> shared, latent;
  int64_t vectors = 0;  // latent vectors per run
  int64_t last = 0;     // offset of the last one in the run
  void Build(const float* q, const float* ql, int64_t heads, int64_t n,
             int64_t r, int64_t g) {
    shared.assign(heads * n, 0.0f);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t block = h / kW, hl = h % kW;
      for (int64_t c = 0; c < n; ++c) {
        shared[block * kW * n + ((c / kW) * kW + hl) * kW + c % kW] =
            q[h * n + c];
      }
    }
    vectors = (r + kW - 1) / kW;
    last = r - kW;
    latent.assign(heads * vectors * kW, 0.0f);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t block = h / kW, hl = h % kW, k = hl / g, j = hl % g;
      for (int64_t v = 0; v < vectors; ++v) {
        float* out = &latent[block * kW * vectors * kW +
                             ((k * vectors + v) * g + j) * kW];
        const int64_t at = v < vectors - 1 ? v * kW : last;
        for (int64_t l = 0; l < kW; ++l) {
          const bool seen = v == vectors - 1 && at + l < (vectors - 1) * kW;
          out[l] = seen ? 0.0f : ql[h * r + at + l];
        }
      }
    }
  }
};

// out[h] = q_h · x + ql_h · z_kv(h) for the kW heads of block `block` (G per
// KV head): the shared key's dot and the latent key's summed in the same
// accumulators and reduced once. Reducing the latent dots on their own cost
// a transposed reduction per kW scores of r/kW multiply-adds each, which at
// r = 24 and 47 took as long as the shared keys' larger dots. Each latent
// vector is loaded and widened once for the G heads that read it.
template <int G, typename E>
inline void SharedAndLatentDots(const PackedQueries& pq, int64_t block,
                                const E* x, int64_t n, const E* zrow, int64_t r,
                                float* out) {
  constexpr int NH = static_cast<int>(kW);
  Vf a[NH];
#pragma GCC unroll 16
  for (int h = 0; h < NH; ++h) a[h] = VZero();
  const float* qs = &pq.shared[block * kW * n];
  for (int64_t c = 0; c < n; c += kW, qs += kW * kW) {
    const Vf xv = VLoad(x + c);
#pragma GCC unroll 16
    for (int h = 0; h < NH; ++h) a[h] = VFma(VLoad(qs + h * kW), xv, a[h]);
  }
  const float* ql = &pq.latent[block * kW * pq.vectors * kW];
  const E* z = zrow + block * (NH / G) * r;
#pragma GCC unroll 16
  for (int k = 0; k < NH / G; ++k, z += r) {
    for (int64_t v = 0; v < pq.vectors; ++v, ql += G * kW) {
      const Vf zv = VLoad(z + (v < pq.vectors - 1 ? v * kW : pq.last));
#pragma GCC unroll 8
      for (int j = 0; j < G; ++j) {
        a[k * G + j] = VFma(VLoad(ql + j * kW), zv, a[k * G + j]);
      }
    }
  }
  alignas(64) float sums[kW];
  VSumMany(a, sums);
  for (int h = 0; h < NH; ++h) out[h] = sums[h];
}

// SharedAndLatentDots for g, which `merged` in Factored restricts to 1, 2, 4
// or 8.
template <typename E>
inline void SharedAndLatentBlock(int64_t g, const PackedQueries& pq,
                                 int64_t block, const E* x, int64_t n,
                                 const E* zrow, int64_t r, float* out) {
  switch (g) {
    case 1:
      return SharedAndLatentDots<1>(pq, block, x, n, zrow, r, out);
    case 2:
      return SharedAndLatentDots<2>(pq, block, x, n, zrow, r, out);
    case 4:
      return SharedAndLatentDots<4>(pq, block, x, n, zrow, r, out);
    default:
      return SharedAndLatentDots<8>(pq, block, x, n, zrow, r, out);
  }
}

// out[i] = q · rows[i] for kW rows, one accumulator per row, reduced together;
// n need not be a multiple of kW where masked loads exist. False when it cannot
// serve.
template <typename E>
inline bool DotRowsWide(const float* q, const E* const* rows, int64_t count,
                        int64_t n, float* out) {
#ifndef LRKV_KERNEL_MASKED_TAIL
  if (n % kW != 0) return false;
#endif
  if (count != kW) return false;
  Vf a[kW];
#pragma GCC unroll 16
  for (int i = 0; i < kW; ++i) a[i] = VZero();
  const int64_t nv = n / kW * kW;
  for (int64_t c = 0; c < nv; c += kW) {
    const Vf qv = VLoad(q + c);
#pragma GCC unroll 16
    for (int i = 0; i < kW; ++i) a[i] = VFma(qv, VLoad(rows[i] + c), a[i]);
  }
#ifdef LRKV_KERNEL_MASKED_TAIL
  if (nv < n && kPlainTails && n >= kW) {
    // The last kW elements, the query zeroed where they overlap the vector
    // before (0 · a cached element, which is finite, adds nothing).
    const Vf qv = VZeroFirst(VLoad(q + n - kW), kW - (n - nv));
#pragma GCC unroll 16
    for (int i = 0; i < kW; ++i) a[i] = VFma(qv, VLoad(rows[i] + n - kW), a[i]);
  } else if (nv < n) {
    const int64_t m = n - nv;
    const Vf qv = VLoadN(q + nv, m);
#pragma GCC unroll 16
    for (int i = 0; i < kW; ++i) a[i] = VFma(qv, VLoadN(rows[i] + nv, m), a[i]);
  }
#endif
  VSumMany(a, out);
  return true;
}
#endif

// out[i] = q · rows[i] for `count` rows (one query, many positions): the query
// is loaded once for four rows at a time.
template <typename E>
inline void DotRows(const float* q, const E* const* rows, int64_t count,
                    int64_t n, float* out) {
  int64_t i = 0;
#ifdef LRKV_KERNEL_SIMD
  const int64_t nv = n / kW * kW;
  for (; i + 4 <= count; i += 4) {
    Vf a0 = VZero(), a1 = a0, a2 = a0, a3 = a0;
    const E *x0 = rows[i], *x1 = rows[i + 1], *x2 = rows[i + 2],
            *x3 = rows[i + 3];
    for (int64_t c = 0; c < nv; c += kW) {
      const Vf qv = VLoad(q + c);
      a0 = VFma(qv, VLoad(x0 + c), a0);
      a1 = VFma(qv, VLoad(x1 + c), a1);
      a2 = VFma(qv, VLoad(x2 + c), a2);
      a3 = VFma(qv, VLoad(x3 + c), a3);
    }
    int64_t tail = nv;
#ifdef LRKV_KERNEL_MASKED_TAIL
    if (nv < n) {
      const int64_t m = n - nv;
      const Vf qv = VLoadN(q + nv, m);
      a0 = VFma(qv, VLoadN(x0 + nv, m), a0);
      a1 = VFma(qv, VLoadN(x1 + nv, m), a1);
      a2 = VFma(qv, VLoadN(x2 + nv, m), a2);
      a3 = VFma(qv, VLoadN(x3 + nv, m), a3);
      tail = n;
    }
#endif
    float s[4] = {VSum(a0), VSum(a1), VSum(a2), VSum(a3)};
    for (int64_t c = tail; c < n; ++c) {
      s[0] += q[c] * ToFloat(x0[c]);
      s[1] += q[c] * ToFloat(x1[c]);
      s[2] += q[c] * ToFloat(x2[c]);
      s[3] += q[c] * ToFloat(x3[c]);
    }
    for (int k = 0; k < 4; ++k) out[i + k] = s[k];
  }
#endif
  for (; i < count; ++i) MultiDot(q, 1, rows[i], n, out + i);
}

#ifdef LRKV_KERNEL_MASKED_TAIL
// AccumulateRows for a run shorter than 8 vectors (a latent run, r < 8·kW):
// every vector of the run, the last one masked, in its own register across
// the tile's rows. One vector at a time was a chain of `count` dependent
// multiply-adds per vector.
template <typename E>
inline void AccumulateShortRun(float* acc, const float* p, const E* const* rows,
                               int64_t count, int64_t n) {
  const int64_t full = n / kW, m = n - full * kW;
  // With plain tails the last vector starts at n - kW and is stored first, so
  // that the one before it rewrites the lanes they share.
  const bool plain = kPlainTails && m > 0 && full > 0;
  const int64_t last = plain ? n - kW : full * kW;
  Vf a[8];
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    if (v < full) {
      a[v] = VLoad(acc + v * kW);
    } else if (v == full && m > 0) {
      a[v] = plain ? VLoad(acc + last) : VLoadN(acc + last, m);
    }
  }
  for (int64_t t = 0; t < count; ++t) {
    const Vf pv = VSet(p[t]);
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      if (v < full) {
        a[v] = VFma(pv, VLoad(rows[t] + v * kW), a[v]);
      } else if (v == full && m > 0) {
        a[v] =
            VFma(pv, plain ? VLoad(rows[t] + last) : VLoadN(rows[t] + last, m),
                 a[v]);
      }
    }
  }
  if (m > 0 && full < 8) {
    if (plain) {
      VStore(acc + last, a[full]);
    } else {
      VStoreN(acc + last, a[full], m);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    if (v < full) VStore(acc + v * kW, a[v]);
  }
}
#endif

// acc[0:n] += Σ_t p[t] · rows[t][0:n] for the `count` rows of a tile. Blocks
// of eight vectors are walked row by row, so that each row is read in order:
// walking one vector of every row at a time touched the tile's lines column by
// column, and the MHA step (paper shape, L = 8192, 2 threads, timed
// alternately) took 1.15-1.35x as long with bf16 rows (1.03x with fp32).
template <typename E>
inline void AccumulateRows(float* acc, const float* p, const E* const* rows,
                           int64_t count, int64_t n) {
  int64_t c = 0;
#ifdef LRKV_KERNEL_MASKED_TAIL
  if (n < 8 * kW) {
    AccumulateShortRun(acc, p, rows, count, n);
    return;
  }
#endif
#ifdef LRKV_KERNEL_SIMD
  for (; c + 8 * kW <= n; c += 8 * kW) {
    Vf a[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) a[v] = VLoad(acc + c + v * kW);
    for (int64_t t = 0; t < count; ++t) {
      const Vf pv = VSet(p[t]);
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        a[v] = VFma(pv, VLoad(rows[t] + c + v * kW), a[v]);
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) VStore(acc + c + v * kW, a[v]);
  }
  for (; c + kW <= n; c += kW) {
    Vf a = VLoad(acc + c);
    for (int64_t t = 0; t < count; ++t)
      a = VFma(VSet(p[t]), VLoad(rows[t] + c), a);
    VStore(acc + c, a);
  }
#ifdef LRKV_KERNEL_MASKED_TAIL
  if (c < n) {
    const int64_t m = n - c;
    Vf a = VLoadN(acc + c, m);
    for (int64_t t = 0; t < count; ++t)
      a = VFma(VSet(p[t]), VLoadN(rows[t] + c, m), a);
    VStoreN(acc + c, a, m);
    c = n;
  }
#endif
#endif
  for (; c < n; ++c) {
    float a = acc[c];
    for (int64_t t = 0; t < count; ++t) a += p[t] * ToFloat(rows[t][c]);
    acc[c] = a;
  }
}

// Asks for the `n` elements at `row` into L1, a line at a time.
template <typename E>
inline void PrefetchRow(const E* row, int64_t n) {
  const char* at = reinterpret_cast<const char*>(row);
  for (int64_t byte = 0; byte < n * int64_t{sizeof(E)}; byte += 64)
    __builtin_prefetch(at + byte, 0, 3);
}

#ifdef LRKV_KERNEL_SIMD
// acc_h[n:n+r] += Σ_t w_h[t] · z_t,kv(h) for every head h (accumulators
// `per_head` apart, weights w[h·kTile + t]) over the `count` rows of a tile
// (row t of the latent values at rows + t·stride, KV head kvh's run at
// kvh·r): four rows at a time, each row read in order, all KV heads, with the
// accumulators in memory (L1). Reading one KV head's run of every row before
// the next head's (accumulators in registers) walked the tile's rows with a
// stride the hardware prefetcher did not follow and took 3-5 cycles per
// multiply-add at the Qwen3-0.6B shape. A run that is not a whole number of
// vectors ends in a plain vector at [r − kW, r) with the lanes the vector
// before covers zeroed (adding 0). Needs r >= kW.
template <typename E>
inline void AccumulateLatentRows(float* acc, int64_t per_head, int64_t n,
                                 const float* w, const E* rows, int64_t stride,
                                 int64_t count, int64_t heads, int64_t g,
                                 int64_t r) {
  const int64_t vectors = (r + kW - 1) / kW;
  const int64_t overlap = vectors * kW - r;  // lanes of the last vector seen
  int64_t t = 0;
  for (; t < count; t += 4) {
    const int64_t nr = std::min<int64_t>(4, count - t);
    const E* z[4];
    for (int i = 0; i < 4; ++i)
      z[i] = rows + (t + std::min<int64_t>(i, nr - 1)) * stride;
    for (int64_t h0 = 0; h0 < heads; h0 += g) {
      const int64_t off = (h0 / g) * r;
      for (int64_t v = 0; v < vectors; ++v) {
        const bool tail = v == vectors - 1 && overlap > 0;
        const int64_t at = tail ? r - kW : v * kW;
        Vf x[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          x[i] = VLoad(z[i] + off + at);
          if (tail) x[i] = VZeroFirst(x[i], overlap);
        }
        for (int64_t h = h0; h < h0 + g; ++h) {
          float* a = acc + h * per_head + n + at;
          const float* wh = w + h * kTile + t;
          Vf sum = VLoad(a);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            if (i < nr) sum = VFma(VSet(wh[i]), x[i], sum);
          }
          VStore(a, sum);
        }
      }
    }
  }
}
#endif

// acc_k[0:n] += Σ_t p_k[t] · rows[t][0:n] for four heads k that read the same
// rows: each row chunk is loaded (and widened) once for the four heads.
template <typename E>
inline void AccumulateRows4(float* const* acc, const float* const* p,
                            const E* const* rows, int64_t count, int64_t n) {
  int64_t c = 0;
#ifdef LRKV_KERNEL_SIMD
  // Two vectors of each head at a time: eight independent chains (four chains
  // of `count` dependent multiply-adds left half the FMA units idle on AVX2).
  for (; c + 2 * kW <= n; c += 2 * kW) {
    Vf a[4][2];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      a[k][0] = VLoad(acc[k] + c);
      a[k][1] = VLoad(acc[k] + c + kW);
    }
    for (int64_t t = 0; t < count; ++t) {
      const Vf x0 = VLoad(rows[t] + c), x1 = VLoad(rows[t] + c + kW);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const Vf pk = VSet(p[k][t]);
        a[k][0] = VFma(pk, x0, a[k][0]);
        a[k][1] = VFma(pk, x1, a[k][1]);
      }
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      VStore(acc[k] + c, a[k][0]);
      VStore(acc[k] + c + kW, a[k][1]);
    }
  }
  for (; c + kW <= n; c += kW) {
    Vf a0 = VLoad(acc[0] + c), a1 = VLoad(acc[1] + c), a2 = VLoad(acc[2] + c),
       a3 = VLoad(acc[3] + c);
    for (int64_t t = 0; t < count; ++t) {
      const Vf x = VLoad(rows[t] + c);
      a0 = VFma(VSet(p[0][t]), x, a0);
      a1 = VFma(VSet(p[1][t]), x, a1);
      a2 = VFma(VSet(p[2][t]), x, a2);
      a3 = VFma(VSet(p[3][t]), x, a3);
    }
    VStore(acc[0] + c, a0);
    VStore(acc[1] + c, a1);
    VStore(acc[2] + c, a2);
    VStore(acc[3] + c, a3);
  }
#endif
  for (; c < n; ++c) {
    for (int k = 0; k < 4; ++k) {
      float a = acc[k][c];
      for (int64_t t = 0; t < count; ++t) a += p[k][t] * ToFloat(rows[t][c]);
      acc[k][c] = a;
    }
  }
}

template <typename E>
void Mha(const MhaDecodeParams& p) {
#ifdef LRKV_KERNEL_SIMD
  if (TryMhaGrouped<E>(p)) return;
#endif
  const int64_t g = p.heads / p.kv_heads, dh = p.head_dim;
  const int64_t pairs = p.batch * p.kv_heads;
  const int64_t splits = SplitsFor(pairs, p.length);
  const int64_t chunk = (p.length + splits - 1) / splits;
  // Partial state per (sequence, KV head, chunk, head of the group).
  std::vector<HeadState> states(pairs * splits * g);
  std::vector<float> accs(pairs * splits * g * dh, 0.0f);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < pairs * splits; ++item) {
    const int64_t pair = item / splits, split = item % splits;
    const int64_t b = pair / p.kv_heads, kvh = pair % p.kv_heads;
    const int64_t t0 = split * chunk, t1 = std::min(p.LengthOf(b), t0 + chunk);
    const E* k = static_cast<const E*>(p.KeysOf(b)) + p.Offset(0, kvh, 0);
    const E* v = static_cast<const E*>(p.ValuesOf(b)) + p.Offset(0, kvh, 0);
    const int64_t step = p.Offset(0, 0, 1);  // elements between positions
    // The group's queries, pre-scaled.
    std::vector<float> q(g * dh);
    for (int64_t i = 0; i < g * dh; ++i)
      q[i] = p.q[(b * p.heads + kvh * g) * dh + i] * p.scale;
    HeadState* st = &states[item * g];
    float* acc = &accs[item * g * dh];
    float s[kTile * 64], w[kTile], dots[64];
    const E* rows[kTile];
    const E* krows[kTile];
    for (int64_t t = t0; t < t1; t += kTile) {
      const int64_t count = std::min(kTile, t1 - t);
      for (int64_t i = 0; i < count; ++i) {
        krows[i] = k + (t + i) * step;
        rows[i] = v + (t + i) * step;
      }
      if constexpr (std::is_same_v<E, float>) {
        // fp32 rows: prefetch the K and V rows four tiles ahead into L2. At
        // the paper shape (b = 4, L = 8192, 2 threads, this kernel timed
        // alternately with and without) it took the step to 0.74-0.86 of the
        // time; bf16 rows measured 1.07-1.49x slower with it (the hardware
        // prefetcher follows them better alone), so they go without.
        const auto* kp =
            reinterpret_cast<const char*>(k + (t + 4 * kTile) * step);
        const auto* vp =
            reinterpret_cast<const char*>(v + (t + 4 * kTile) * step);
        for (int64_t o = 0; o < count * step * int64_t{sizeof(E)}; o += 64) {
          __builtin_prefetch(kp + o, 0, 2);
          __builtin_prefetch(vp + o, 0, 2);
        }
      }
      if (g < 4) {
        // Few heads per KV head: vectorise across positions instead.
        for (int64_t h = 0; h < g; ++h)
          DotRows(q.data() + h * dh, krows, count, dh, &s[h * kTile]);
      } else {
        for (int64_t i = 0; i < count; ++i) {
          MultiDot(q.data(), g, krows[i], dh, dots);
          for (int64_t h = 0; h < g; ++h) s[h * kTile + i] = dots[h];
        }
      }
      for (int64_t h = 0; h < g; ++h) {
        SoftmaxTile(&st[h], &s[h * kTile], count, w, acc + h * dh, dh, nullptr,
                    0);
        AccumulateRows(acc + h * dh, w, rows, count, dh);
      }
    }
  }
  // Output (pair·g + h)·dh is (b·heads + kvh·g + h)·dh.
  MergeAllChunks(states, accs, pairs, splits, g, dh, 0, p.out, nullptr);
}

#if LRKV_KERNEL_SIMD == 8
// Transposes the 8×8 block of rows in[0..7] into out[0..7].
LRKV_KERNEL_INLINE void Transpose8(const Vf* in, Vf* out) {
  Vf t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(in[2 * k], in[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(in[2 * k], in[2 * k + 1]);
  }
  for (int k = 0; k < 2; ++k) {
    u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
    u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xee);
    u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
    u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xee);
  }
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    out[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}

// SoftmaxTile for 8 heads and a whole tile of 16 scores each (s[h·16 + i]),
// the heads in the lanes: the tile's scores transposed to one vector per
// position, their maxima, the correction and the weights computed for the 8
// heads at once, and the weights transposed back into w[h·16 + i]. Head by
// head, the horizontal maximum, a scalar exp and the horizontal sum made a
// chain per head and tile: 0.17-0.22 of the step at the Llama-3.2-1B shape
// (32 heads, r = 24). Accumulators acc + h·per_head are rescaled where a
// head's maximum moved.
inline void SoftmaxTile8(HeadState* st, const float* s, float* w, float* acc,
                         int64_t per_head) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  Vf rows[8], cols[16];
  for (int half = 0; half < 2; ++half) {
    for (int h = 0; h < 8; ++h) rows[h] = VLoad(s + h * kTile + half * 8);
    Transpose8(rows, cols + half * 8);
  }
  alignas(32) float m_old[8], l_old[8];
  for (int h = 0; h < 8; ++h) {
    m_old[h] = st[h].m;
    l_old[h] = st[h].l;
  }
  const Vf mo = VLoad(m_old);
  Vf m = mo;
  for (int i = 0; i < 16; ++i) m = VMax(cols[i], m);
  // A head with no finite score yet keeps a maximum of -inf and weighs
  // nothing (exp(-inf - 0) = 0).
  const Vf none = _mm256_cmp_ps(m, VSet(kNegInf), _CMP_EQ_OQ);
  const Vf shift = _mm256_blendv_ps(m, VZero(), none);
  const Vf corr = VExp(_mm256_sub_ps(mo, shift));  // 0 from an empty state
  Vf l = VMul(VLoad(l_old), corr);
  for (int i = 0; i < 16; ++i) {
    cols[i] = VExp(_mm256_sub_ps(cols[i], shift));
    l = VAdd(l, cols[i]);
  }
  alignas(32) float m_new[8], l_new[8], c[8];
  VStore(m_new, m);
  VStore(l_new, l);
  VStore(c, corr);
  for (int h = 0; h < 8; ++h) {
    st[h].l = l_new[h];
    if (m_new[h] == m_old[h]) continue;  // the maximum did not move
    st[h].m = m_new[h];
    float* a = acc + h * per_head;
    for (int64_t k = 0; k < per_head; ++k) a[k] *= c[h];
  }
  for (int half = 0; half < 2; ++half) {
    Transpose8(cols + half * 8, rows);
    for (int h = 0; h < 8; ++h) VStore(w + h * kTile + half * 8, rows[h]);
  }
}
#endif

template <typename E>
void Factored(const FactoredDecodeParams& p) {
  const int64_t H = p.heads, g = H / p.kv_heads, n = p.dim, r = p.rank;
  const int64_t splits = SplitsFor(p.batch, p.length);
  const int64_t chunk = (p.length + splits - 1) / splits;
  const int64_t items = p.batch * splits;
  const int64_t per_head = n + r;  // accumulator floats per head
  std::vector<HeadState> states(items * H);
  std::vector<float> accs(items * H * per_head, 0.0f);
  const E* kb = static_cast<const E*>(p.k.data);
  const E* vb = static_cast<const E*>(p.v.data);
  const E* zkb = static_cast<const E*>(p.zk.data);
  const E* zvb = static_cast<const E*>(p.zv.data);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t b = item / splits, split = item % splits;
    const int64_t t0 = split * chunk, t1 = std::min(p.length, t0 + chunk);
    const E* kseq = kb + b * p.capacity * p.k.stride;
    const E* vseq = vb + b * p.capacity * p.v.stride;
    const E* zkseq = r > 0 ? zkb + b * p.capacity * p.zk.stride : nullptr;
    const E* zvseq = r > 0 ? zvb + b * p.capacity * p.zv.stride : nullptr;
    const float* sigma =
        p.sigma != nullptr ? p.sigma + b * p.capacity * p.kv_heads : nullptr;
    std::vector<float> q(H * n), ql(H * r);
    for (int64_t i = 0; i < H * n; ++i) q[i] = p.q[b * H * n + i] * p.scale;
    if (p.q_latent != nullptr) {
      for (int64_t i = 0; i < H * r; ++i)
        ql[i] = p.q_latent[b * H * r + i] * p.scale;
    }
#ifdef LRKV_KERNEL_SIMD
    // Shared and latent key dots in one pass (SharedAndLatentDots) where the
    // heads fill whole blocks of kW, each block whole KV groups, and r >= kW.
    const bool merged = r >= kW && p.up_k_t == nullptr && H % kW == 0 &&
                        kW % g == 0 && n % kW == 0 &&
                        (g == 1 || g == 2 || g == 4 || g == 8);
    PackedQueries pq;
    if (merged) pq.Build(q.data(), ql.data(), H, n, r, g);
#else
    const bool merged = false;
#endif
    HeadState* st = &states[item * H];
    float* acc = &accs[item * H * per_head];
    std::vector<float> s(H * kTile), dots(H), latent_dots(g), res(n);
    std::vector<float> wbuf(H * kTile), lat(H * kTile);
    const E* zrows[kTile];
    // The latent arrays are read head by head, a short run per position, which
    // the hardware prefetcher does not follow: fetch them two tiles ahead.
    auto prefetch = [&](const E* seq, const CacheSegment& seg, int64_t from) {
      if (seq == nullptr || from >= t1) return;
      const char* a = reinterpret_cast<const char*>(seq + from * seg.stride);
      const int64_t bytes =
          std::min(kTile, t1 - from) * seg.stride * int64_t{sizeof(E)};
      for (int64_t off = 0; off < bytes; off += 64)
        __builtin_prefetch(a + off, 0, 3);
    };
    for (int64_t t = t0; t < t1; t += kTile) {
      const int64_t count = std::min(kTile, t1 - t);
      if (!merged) {
        prefetch(zkseq, p.zk, t + 2 * kTile);
        prefetch(zvseq, p.zv, t + 2 * kTile);
      }
      // Shared key: read once per position for all H heads.
      for (int64_t i = 0; i < count; ++i) {
        const E* krow = kseq + (t + i) * p.k.stride;
#ifdef LRKV_KERNEL_SIMD
        if (merged) {
          const E* zrow = zkseq + (t + i) * p.zk.stride;
          // The values this position's row will need once the tile's
          // scores are in, asked for now, a row at a time: the latent values
          // read in a burst per tile (or prefetched so, two tiles ahead)
          // waited on memory, and took 0.78 of the MHA step's time against
          // 0.61-0.65 this way (Qwen3-0.6B shape, L = 2048, 28 layers' caches,
          // timed alternately); Llama-3.2-1B's 1.04 against 0.93.
          PrefetchRow(zvseq + (t + i) * p.zv.stride, p.zv.stride);
          PrefetchRow(vseq + (t + i) * p.v.stride, p.v.stride);
          for (int64_t h0 = 0; h0 < H; h0 += kW) {
            SharedAndLatentBlock(g, pq, h0 / kW, krow, n, zrow, r,
                                 dots.data() + h0);
          }
          for (int64_t h = 0; h < H; ++h) s[h * kTile + i] = dots[h];
          continue;
        }
        // Blocks of up to kW heads; a block MultiDotWide does not serve takes
        // the general path (only that block).
        for (int64_t h0 = 0; h0 < H; h0 += kW) {
          const int64_t nh = std::min(kW, H - h0);
          if (!MultiDotWide(q.data() + h0 * n, nh, krow, n, dots.data() + h0))
            MultiDot(q.data() + h0 * n, nh, krow, n, dots.data() + h0);
        }
#else
        MultiDot(q.data(), H, krow, n, dots.data());
#endif
        for (int64_t h = 0; h < H; ++h) s[h * kTile + i] = dots[h];
      }
      for (int64_t kvh = 0; kvh < p.kv_heads && r > 0 && !merged; ++kvh) {
        for (int64_t i = 0; i < count; ++i)
          zrows[i] = zkseq + (t + i) * p.zk.stride + kvh * r;
        if (p.up_k_t != nullptr) {
          for (int64_t i = 0; i < count; ++i) {
            // Rebuild B_h z_t, rotate it at position t, dot with the rotated
            // queries.
            std::fill(res.begin(), res.end(), 0.0f);
            const float* bt = p.up_k_t + kvh * r * n;
            for (int64_t j = 0; j < r; ++j) {
              const float zj = ToFloat(zrows[i][j]);
              const float* col = bt + j * n;
              for (int64_t c = 0; c < n; ++c) res[c] += zj * col[c];
            }
            const float* cs = p.rope_cos + (t + i) * (n / 2);
            const float* sn = p.rope_sin + (t + i) * (n / 2);
            for (int64_t c = 0; c < n / 2; ++c) {
              const float x0 = res[2 * c], x1 = res[2 * c + 1];
              res[2 * c] = x0 * cs[c] - x1 * sn[c];
              res[2 * c + 1] = x0 * sn[c] + x1 * cs[c];
            }
            MultiDot(q.data() + kvh * g * n, g, res.data(), n,
                     latent_dots.data());
            for (int64_t j = 0; j < g; ++j)
              s[(kvh * g + j) * kTile + i] += latent_dots[j];
          }
        } else {
          for (int64_t j = 0; j < g; ++j) {
            const int64_t h = kvh * g + j;
#ifdef LRKV_KERNEL_SIMD
            // Blocks of kW positions; a block DotRowsWide does not serve (a
            // partial one, or no masked loads) takes the general path.
            for (int64_t i0 = 0; i0 < count; i0 += kW) {
              const int64_t m = std::min(kW, count - i0);
              if (!DotRowsWide(ql.data() + h * r, zrows + i0, m, r,
                               &lat[h * kTile + i0]))
                DotRows(ql.data() + h * r, zrows + i0, m, r,
                        &lat[h * kTile + i0]);
            }
#else
            DotRows(ql.data() + h * r, zrows, count, r, &lat[h * kTile]);
#endif
            for (int64_t i = 0; i < count; ++i)
              s[h * kTile + i] += lat[h * kTile + i];
          }
        }
      }
      if (sigma != nullptr) {
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t i = 0; i < count; ++i)
            s[h * kTile + i] *= sigma[(t + i) * p.kv_heads + h / g];
        }
      }
      int64_t h_done = 0;
#if LRKV_KERNEL_SIMD == 8
      if (count == kTile) {
        for (; h_done + 8 <= H; h_done += 8) {
          SoftmaxTile8(&st[h_done], &s[h_done * kTile], &wbuf[h_done * kTile],
                       acc + h_done * per_head, per_head);
        }
      }
#endif
      for (int64_t h = h_done; h < H; ++h) {
        float* a = acc + h * per_head;
        SoftmaxTile(&st[h], &s[h * kTile], count, &wbuf[h * kTile], a, n, a + n,
                    r);
      }
      // a · V_shared: four heads per pass over the tile's value rows.
      const E* vrows[kTile];
      for (int64_t i = 0; i < count; ++i)
        vrows[i] = vseq + (t + i) * p.v.stride;
      int64_t h = 0;
      for (; h + 4 <= H; h += 4) {
        float* accs4[4] = {acc + h * per_head, acc + (h + 1) * per_head,
                           acc + (h + 2) * per_head, acc + (h + 3) * per_head};
        const float* w4[4] = {&wbuf[h * kTile], &wbuf[(h + 1) * kTile],
                              &wbuf[(h + 2) * kTile], &wbuf[(h + 3) * kTile]};
        AccumulateRows4(accs4, w4, vrows, count, n);
      }
      for (; h < H; ++h)
        AccumulateRows(acc + h * per_head, &wbuf[h * kTile], vrows, count, n);
        // a · Z_V: row by row where the run allows (r >= kW), else per head.
#ifdef LRKV_KERNEL_SIMD
      const bool latent_rows = r >= kW;
      if (latent_rows) {
        AccumulateLatentRows(acc, per_head, n, wbuf.data(),
                             zvseq + t * p.zv.stride, p.zv.stride, count, H, g,
                             r);
      }
#else
      const bool latent_rows = false;
#endif
      for (int64_t kvh = 0; kvh < p.kv_heads && r > 0 && !latent_rows; ++kvh) {
        for (int64_t i = 0; i < count; ++i) {
          zrows[i] = zvseq + (t + i) * p.zv.stride + kvh * r;
        }
        for (int64_t j = 0; j < g; ++j) {
          const int64_t hh = kvh * g + j;
          AccumulateRows(acc + hh * per_head + n, &wbuf[hh * kTile], zrows,
                         count, r);
        }
      }
    }
  }
  MergeAllChunks(states, accs, p.batch, splits, H, n, r, p.out, p.out_latent);
}

}  // namespace
}  // namespace lrkv::kernels::LRKV_KERNEL_NS

#include "kernels/decode_quantized_impl.h"

namespace lrkv::kernels::LRKV_KERNEL_NS {

void MhaDecodeImpl(const MhaDecodeParams& p) {
  switch (p.dtype) {
    case CacheDType::kF32:
      return Mha<float>(p);
    case CacheDType::kBF16:
      return Mha<uint16_t>(p);
    case CacheDType::kQ8_0:
      return MhaQuantized<CacheDType::kQ8_0>(p);
    case CacheDType::kQ4_0:
      return MhaQuantized<CacheDType::kQ4_0>(p);
  }
}

void FactoredDecodeImpl(const FactoredDecodeParams& p) {
  switch (p.dtype) {
    case CacheDType::kF32:
      return Factored<float>(p);
    case CacheDType::kBF16:
      return Factored<uint16_t>(p);
    case CacheDType::kQ8_0:
      return FactoredQuantized<CacheDType::kQ8_0>(p);
    case CacheDType::kQ4_0:
      return FactoredQuantized<CacheDType::kQ4_0>(p);
  }
}

}  // namespace lrkv::kernels::LRKV_KERNEL_NS
