// The fused factored-decode kernel on the tiled cache layout
// (CacheLayout::kTiles in decode_params.h), for CPUs with AVX-512 and
// AVX512-BF16. Flash-decoding as in decode_impl.h (chunks of positions in
// parallel, an online softmax per tile, chunks merged at the end), but every
// inner loop is a whole 64-byte vector with no horizontal sums:
//  - scores: a key vector holds one lane (P dims) of 16 positions, so each
//    head's 16 scores accumulate lane-wise against a broadcast query word; the
//    shared key's vector is loaded once for all heads;
//  - values: a value vector holds 16 dims of P positions, weighted by a
//    broadcast word of the heads' probabilities.
// bf16 caches multiply with vdpbf16ps (32 products per instruction). Its other
// operand is bf16 too, so each fp32 query or probability f is split into
// hi = bf16(f) and lo = bf16(f − hi), and both are applied: |f − hi − lo| ≤
// 2^-16·|f|, the products with the bf16 cache element are exact, and the sums
// are fp32 — the accuracy of an fp32 FMA on the widened element. fp32 caches
// use FMAs on the same layout.
#define LRKV_KERNEL_NS avx512bf16
#include <type_traits>

#include "kernels/decode_simd.h"

namespace lrkv::kernels::avx512bf16 {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Round to nearest even (the values here are finite).
uint16_t ToBf16(float f) {
  const uint32_t b = Bits(f);
  return static_cast<uint16_t>((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

struct Bf16 {
  using E = uint16_t;
  static constexpr int64_t kPerLane = 2;
  static __m512 Mac(__m512 acc, __m512i x, const uint32_t* hi,
                    const uint32_t* lo) {
    acc = _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)_mm512_set1_epi32(*hi));
    return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)_mm512_set1_epi32(*lo));
  }
  // Words of P consecutive values (zero where past n): hi[w] and lo[w].
  static void Words(const float* x, int64_t n, float scale, int64_t words,
                    uint32_t* hi, uint32_t* lo, int64_t step) {
    for (int64_t w = 0; w < words; ++w) {
      uint32_t h = 0, l = 0;
      for (int64_t e = 0; e < 2; ++e) {
        const int64_t c = 2 * w + e;
        const float f = c < n ? x[c] * scale : 0.0f;
        const uint16_t fh = ToBf16(f);
        const uint16_t fl = ToBf16(f - ToFloat(fh));
        h |= static_cast<uint32_t>(fh) << (16 * e);
        l |= static_cast<uint32_t>(fl) << (16 * e);
      }
      hi[w * step] = h;
      lo[w * step] = l;
    }
  }
  // The tile's probabilities (16 lanes) as 8 words of position pairs.
  static void ProbabilityWords(__m512 p, uint32_t* hi, uint32_t* lo,
                               int64_t step) {
    const __m256bh h = _mm512_cvtneps_pbh(p);
    const __m512 back = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16));
    const __m256bh l = _mm512_cvtneps_pbh(_mm512_sub_ps(p, back));
    alignas(32) uint32_t wh[8], wl[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(wh), (__m256i)h);
    _mm256_store_si256(reinterpret_cast<__m256i*>(wl), (__m256i)l);
    for (int k = 0; k < 8; ++k) {
      hi[k * step] = wh[k];
      lo[k * step] = wl[k];
    }
  }
};

struct F32 {
  using E = float;
  static constexpr int64_t kPerLane = 1;
  static __m512 Mac(__m512 acc, __m512i x, const uint32_t* w,
                    const uint32_t* /*unused*/) {
    float f;
    std::memcpy(&f, w, 4);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(x), _mm512_set1_ps(f), acc);
  }
  static void Words(const float* x, int64_t n, float scale, int64_t words,
                    uint32_t* hi, uint32_t* lo, int64_t step) {
    for (int64_t w = 0; w < words; ++w) {
      hi[w * step] = lo[w * step] = Bits(w < n ? x[w] * scale : 0.0f);
    }
  }
  static void ProbabilityWords(__m512 p, uint32_t* hi, uint32_t* lo,
                               int64_t step) {
    alignas(64) uint32_t w[16];
    _mm512_store_si512(w, _mm512_castps_si512(p));
    for (int k = 0; k < 16; ++k) hi[k * step] = lo[k * step] = w[k];
  }
};

// Calls f(integral_constant<int, NB>, h0) over blocks of heads covering [0, H)
// with NB ∈ {12, 8, 4, 2, 1}: compile-time block sizes keep the accumulators
// in registers.
template <class F>
void ForHeadBlocks(int64_t H, F&& f) {
  for (int64_t h0 = 0; h0 < H;) {
    const int64_t left = H - h0;
    if (left >= 12) {
      f(std::integral_constant<int, 12>(), h0);
      h0 += 12;
    } else if (left >= 8) {
      f(std::integral_constant<int, 8>(), h0);
      h0 += 8;
    } else if (left >= 4) {
      f(std::integral_constant<int, 4>(), h0);
      h0 += 4;
    } else if (left >= 2) {
      f(std::integral_constant<int, 2>(), h0);
      h0 += 2;
    } else {
      f(std::integral_constant<int, 1>(), h0);
      h0 += 1;
    }
  }
}

// Word w of query head h lives at words[w·H + h] (hi) and lo[w·H + h].
struct WordTable {
  std::vector<uint32_t> hi, lo;
  int64_t heads = 0;
  void Resize(int64_t words, int64_t h) {
    heads = h;
    hi.assign(words * h, 0);
    lo.assign(words * h, 0);
  }
  const uint32_t* Hi(int64_t w, int64_t h) const { return &hi[w * heads + h]; }
  const uint32_t* Lo(int64_t w, int64_t h) const { return &lo[w * heads + h]; }
};

// s[h·16 + i] = score of position i for the block's NB heads from h0: the
// shared key's words (one vector for all heads), then each head's latent
// words at byte offset zoff[h] of the zK tile.
template <class T, int NB>
inline void TileScores(int64_t h0, const char* ktile, const WordTable& qk,
                       int64_t kwords, const char* zktile, const int64_t* zoff,
                       const WordTable& ql, int64_t lwords, float* s) {
  __m512 acc[NB];
#pragma GCC unroll 12
  for (int h = 0; h < NB; ++h) acc[h] = _mm512_setzero_ps();
  for (int64_t w = 0; w < kwords; ++w) {
    const __m512i x = _mm512_loadu_si512(ktile + w * 64);
    const uint32_t *hi = qk.Hi(w, h0), *lo = qk.Lo(w, h0);
#pragma GCC unroll 12
    for (int h = 0; h < NB; ++h) acc[h] = T::Mac(acc[h], x, hi + h, lo + h);
  }
  for (int64_t w = 0; w < lwords; ++w) {
    const uint32_t *hi = ql.Hi(w, h0), *lo = ql.Lo(w, h0);
    const char* row = zktile + w * 64;
#pragma GCC unroll 12
    for (int h = 0; h < NB; ++h) {
      const __m512i x = _mm512_loadu_si512(row + zoff[h0 + h]);
      acc[h] = T::Mac(acc[h], x, hi + h, lo + h);
    }
  }
#pragma GCC unroll 12
  for (int h = 0; h < NB; ++h) _mm512_storeu_ps(s + (h0 + h) * 16, acc[h]);
}

// acc[h][c0 + 16v + lane] += Σ_k word_h(k) · x_h(k, v) for the block's NB
// heads and NV vectors of 16 dims (the last one `last` lanes wide), where
// x_h(k, v) is the value vector at tile + k·row_bytes + voff[h] + (c0+16v)·4
// and word_h(k) weights its P positions. When `half` is set the last row
// holds one valid position: the other element of each lane is cleared, since
// past the cache's length it may hold anything.
template <class T, int NB, int NV>
inline void TileValues(int64_t h0, const char* tile, int64_t row_bytes,
                       int64_t rows, bool half, const int64_t* voff, int64_t c0,
                       int64_t last, const WordTable& pw, float* acc,
                       int64_t per_head) {
  const __mmask16 full = 0xffff;
  const __mmask16 mlast = static_cast<__mmask16>((1u << last) - 1);
  __m512 a[NB][NV];
#pragma GCC unroll 12
  for (int h = 0; h < NB; ++h) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      a[h][v] = _mm512_maskz_loadu_ps(v == NV - 1 ? mlast : full,
                                      acc + (h0 + h) * per_head + c0 + 16 * v);
    }
  }
  auto row = [&](int64_t k, __m512i keep) {
    const char* base = tile + k * row_bytes + c0 * 4;
    const uint32_t *hi = pw.Hi(k, h0), *lo = pw.Lo(k, h0);
#pragma GCC unroll 12
    for (int h = 0; h < NB; ++h) {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        const char* at = base + voff[h0 + h] + 64 * v;
        __m512i x = v == NV - 1 && last < 16
                        ? _mm512_maskz_loadu_epi32(mlast, at)
                        : _mm512_loadu_si512(at);
        x = _mm512_and_si512(x, keep);
        a[h][v] = T::Mac(a[h][v], x, hi + h, lo + h);
      }
    }
  };
  const int64_t whole = half ? rows - 1 : rows;
  for (int64_t k = 0; k < whole; ++k) row(k, _mm512_set1_epi32(-1));
  if (half) row(whole, _mm512_set1_epi32(0xffff));
#pragma GCC unroll 12
  for (int h = 0; h < NB; ++h) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      _mm512_mask_storeu_ps(acc + (h0 + h) * per_head + c0 + 16 * v,
                            v == NV - 1 ? mlast : full, a[h][v]);
    }
  }
}

// Weighted sums of `width` dims for every head, in column blocks of up to 32.
template <class T>
void AccumulateValues(int64_t H, const char* tile, int64_t row_bytes,
                      int64_t rows, bool half, const int64_t* voff,
                      int64_t width, const WordTable& pw, float* acc,
                      int64_t per_head) {
  for (int64_t c0 = 0; c0 < width; c0 += 32) {
    const int64_t left = width - c0;
    ForHeadBlocks(H, [&](auto nb, int64_t h0) {
      constexpr int NB = decltype(nb)::value;
      if (left > 16) {
        TileValues<T, NB, 2>(h0, tile, row_bytes, rows, half, voff, c0,
                             std::min<int64_t>(16, left - 16), pw, acc,
                             per_head);
      } else {
        TileValues<T, NB, 1>(h0, tile, row_bytes, rows, half, voff, c0, left,
                             pw, acc, per_head);
      }
    });
  }
}

template <class T>
void FactoredTiled(const FactoredDecodeParams& p) {
  using E = typename T::E;
  constexpr int64_t P = T::kPerLane;
  constexpr int64_t es = sizeof(E);
  const int64_t H = p.heads, g = H / p.kv_heads, n = p.dim, r = p.rank;
  const int64_t splits = SplitsFor(p.batch, p.length);
  const int64_t chunk = ((p.length + splits - 1) / splits + kCacheTile - 1) /
                        kCacheTile * kCacheTile;
  const int64_t items = p.batch * splits;
  const int64_t per_head = n + r;
  std::vector<HeadState> states(items * H);
  std::vector<float> accs(items * H * per_head, 0.0f);
  // Key words: the shared key's n dims, and per head its KV head's span of
  // the zK tile (the same count for every head, shifted to stay inside).
  const int64_t kwords = p.k.stride / P;
  const int64_t zwords = r > 0 ? p.zk.stride / P : 0;
  int64_t lwords = 0;
  for (int64_t kvh = 0; kvh < p.kv_heads && r > 0; ++kvh) {
    lwords = std::max(lwords, (kvh * r + r - 1) / P - kvh * r / P + 1);
  }
  std::vector<int64_t> zfirst(H), zoff(H), voff_v(H, 0), voff_z(H);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kvh = h / g;
    zfirst[h] = std::min(kvh * r / P, zwords - lwords);
    zoff[h] = zfirst[h] * 64;
    voff_z[h] = kvh * r * 4;
  }
  const char* kb = static_cast<const char*>(p.k.data);
  const char* vb = static_cast<const char*>(p.v.data);
  const char* zkb = static_cast<const char*>(p.zk.data);
  const char* zvb = static_cast<const char*>(p.zv.data);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t b = item / splits, split = item % splits;
    const int64_t t0 = split * chunk, t1 = std::min(p.length, t0 + chunk);
    if (t0 >= t1) continue;
    WordTable qk, ql, pw;
    qk.Resize(kwords, H);
    ql.Resize(lwords, H);
    pw.Resize(kCacheTile / P, H);
    std::vector<float> lat(lwords * P);
    for (int64_t h = 0; h < H; ++h) {
      T::Words(p.q + (b * H + h) * n, n, p.scale, kwords, &qk.hi[h], &qk.lo[h],
               H);
      if (r == 0) continue;
      // The head's latent query placed at its dims' positions in the span.
      const int64_t first_dim = zfirst[h] * P, own = (h / g) * r;
      for (int64_t i = 0; i < lwords * P; ++i) {
        const int64_t c = first_dim + i - own;
        lat[i] = c >= 0 && c < r ? p.q_latent[(b * H + h) * r + c] : 0.0f;
      }
      T::Words(lat.data(), lwords * P, p.scale, lwords, &ql.hi[h], &ql.lo[h],
               H);
    }
    HeadState* st = &states[item * H];
    float* acc = &accs[item * H * per_head];
    std::vector<float> scores(H * kCacheTile);
    const float* sigma =
        p.sigma != nullptr ? p.sigma + b * p.capacity * p.kv_heads : nullptr;
    for (int64_t t = t0; t < t1; t += kCacheTile) {
      const int64_t count = std::min(kCacheTile, t1 - t);
      const int64_t pos = b * p.capacity + t;  // first position of the tile
      const char* ktile = kb + pos * p.k.stride * es;
      const char* zktile = r > 0 ? zkb + pos * p.zk.stride * es : nullptr;
      ForHeadBlocks(H, [&](auto nb, int64_t h0) {
        TileScores<T, decltype(nb)::value>(h0, ktile, qk, kwords, zktile,
                                           zoff.data(), ql, lwords,
                                           scores.data());
      });
      if (sigma != nullptr) {
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t i = 0; i < count; ++i)
            scores[h * 16 + i] *= sigma[(t + i) * p.kv_heads + h / g];
        }
      }
      const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1);
      for (int64_t h = 0; h < H; ++h) {
        const __m512 sv = _mm512_mask_mov_ps(
            _mm512_set1_ps(-std::numeric_limits<float>::infinity()), valid,
            _mm512_loadu_ps(&scores[h * 16]));
        const float m = std::max(st[h].m, _mm512_reduce_max_ps(sv));
        __m512 pv = _mm512_setzero_ps();  // no finite score yet: no weight
        if (m != -std::numeric_limits<float>::infinity()) {
          const float corr = st[h].l > 0 ? std::exp(st[h].m - m) : 0.0f;
          pv = VExp(_mm512_sub_ps(sv, _mm512_set1_ps(m)));
          st[h].l = st[h].l * corr + _mm512_reduce_add_ps(pv);
          st[h].m = m;
          if (corr != 1.0f) {
            float* a = acc + h * per_head;
            for (int64_t c = 0; c < per_head; ++c) a[c] *= corr;
          }
        }
        T::ProbabilityWords(pv, &pw.hi[h], &pw.lo[h], H);
      }
      // Rows of P positions that hold a valid one; an odd count leaves half
      // of the last row past the length.
      const int64_t rows = (count + P - 1) / P;
      const bool half = count % P != 0;
      AccumulateValues<T>(H, vb + pos * p.v.stride * es, P * p.v.stride * es,
                          rows, half, voff_v.data(), n, pw, acc, per_head);
      if (r > 0) {
        AccumulateValues<T>(H, zvb + pos * p.zv.stride * es,
                            P * p.zv.stride * es, rows, half, voff_z.data(), r,
                            pw, acc + n, per_head);
      }
    }
  }
  std::vector<float> merged(per_head);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      std::vector<HeadState> hs(splits);
      std::vector<const float*> ha(splits);
      for (int64_t s = 0; s < splits; ++s) {
        hs[s] = states[(b * splits + s) * H + h];
        ha[s] = &accs[((b * splits + s) * H + h) * per_head];
      }
      MergeChunks(hs, ha.data(), splits, per_head, merged.data());
      std::copy(merged.begin(), merged.begin() + n, p.out + (b * H + h) * n);
      if (r > 0) {
        std::copy(merged.begin() + n, merged.end(),
                  p.out_latent + (b * H + h) * r);
      }
    }
  }
}

}  // namespace

void FactoredTiledImpl(const FactoredDecodeParams& p) {
  if (p.dtype == CacheDType::kF32) {
    FactoredTiled<F32>(p);
  } else {
    FactoredTiled<Bf16>(p);
  }
}

}  // namespace lrkv::kernels::avx512bf16
