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
// are fp32 — the accuracy of an fp32 FMA on the widened element. With
// FactoredDecodeParams::bf16_operands only hi is applied (half the
// instructions). fp32 caches use FMAs on the same layout.
#define LRKV_KERNEL_NS avx512bf16
#include <type_traits>

#include "kernels/decode_simd.h"
#include "base/dtype.h"

namespace lrkv::kernels::avx512bf16 {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// How many tiles ahead the kernel prefetches, into L2 (T1). A tile of all four
// segments is 47 KB at the paper shape, more than L1 holds. Measured at the
// paper shape (L = 8192, b = 4, 2 threads, timed alternately in one process):
// 2, 3, 6, 8 or 12 tiles ahead within noise of 4; T2 the same as T1, T0 and
// NTA 1.6-1.7x slower; the hardware prefetcher alone 1.4-1.6x slower, every
// other line 1.3x slower: every line has to be asked for.
constexpr int64_t kPrefetchTiles = 4;
// What bounds the step (same measurement, 2 threads on Zen 4): the kernel with
// every multiply replaced by an OR of the loaded vector took the same time as
// the real one (3.1-3.4 ms against 3.1-3.5), so the arithmetic is hidden and
// the read pattern is the limit. The four segments' tiles interleaved in one
// array, or every value block made contiguous in its order of use (a purely
// sequential read), gained 0-5 %, and with the hardware prefetcher alone that
// sequential read took 3.1-3.2 ms without the multiplies but 3.9-4.1 ms with
// them. PREFETCHT0 a tile ahead measured 1.2-1.3x slower, a second T0 pass
// 8-16 KB ahead of the loads beside the T1 pass 0-5 % faster; on Zen 4
// PREFETCHT1/T2 are dropped under load (a loop of prefetches alone "read"
// 230-270 GB/s).

// Prefetches the cache lines of the tile kPrefetchTiles ahead (all four
// segments) a few at a time from inside the compute-bound loops, so that memory
// is asked for evenly through the tile's work. Prefetching each segment inside
// its own loop asked for the 39 KB of latents in bursts during the latent
// loops, which are load-bound already, and left memory idle during the shared
// ones: this way took exact operands to 0.83-0.86 of that step time, rounded
// ones to 0.90-0.91 (same measurement). Issuing lines in the latent-key loop
// too, or evenly per multiply everywhere, measured no better than the old way;
// reading the segments in finer alternation (a quarter of each in turn, or the
// latent-key words inside the shared-key loop) measured 1.01-1.15x slower.
class TilePrefetcher {
 public:
  // The next tile's spans: segment s at `base[s]`, `bytes[s]` long.
  void Start(const char* const* base, const int64_t* bytes) {
    for (int s = 0; s < 4; ++s) {
      at_[s] = base[s];
      end_[s] = base[s] + bytes[s];
    }
    seg_ = 0;
    Skip();
  }
  // Up to n more lines.
  inline void Issue(int n) {
    for (; n > 0 && seg_ < 4; --n) {
      _mm_prefetch(at_[seg_], _MM_HINT_T1);
      at_[seg_] += 64;
      Skip();
    }
  }
  // What is left, spread over the next `calls` calls of Pace() (a whole
  // number each, rounded up: a fractional credit carried in memory between
  // calls cost more than the lines it paced).
  void Spread(int64_t calls) {
    int64_t left = 0;
    for (int s = seg_; s < 4; ++s) left += (end_[s] - at_[s] + 63) / 64;
    per_pace_ = calls > 0 ? static_cast<int>((left + calls - 1) / calls) : 0;
  }
  inline void Pace() { Issue(per_pace_); }
  void Finish() {
    while (seg_ < 4) Issue(64);
  }

 private:
  void Skip() {
    while (seg_ < 4 && at_[seg_] >= end_[seg_]) ++seg_;
  }
  const char* at_[4] = {};
  const char* end_[4] = {};
  int seg_ = 4;
  int per_pace_ = 0;
};

// Lines issued per call of a loop body that runs `dp` multiply instructions:
// about one per five.
constexpr int LinesFor(int dp) { return dp >= 10 ? dp / 5 : 1; }

struct Bf16 {
  using E = uint16_t;
  static constexpr int64_t kPerLane = 2;
  static constexpr int kDp = 2;  // multiply instructions per Mac
  // acc_hi += x · hi, acc_lo += x · lo: two accumulators, so that the two
  // halves of a product do not wait on each other. (Intrinsics rather than
  // asm with the word broadcast inside the instruction: GCC keeps asm-bound
  // accumulator arrays in memory, which measured slower.)
  static void Mac(__m512& a, __m512& b, __m512i x, const uint32_t* hi,
                  const uint32_t* lo) {
    a = _mm512_dpbf16_ps(a, (__m512bh)x, (__m512bh)_mm512_set1_epi32(*hi));
    b = _mm512_dpbf16_ps(b, (__m512bh)x, (__m512bh)_mm512_set1_epi32(*lo));
  }
  // Both into one accumulator, where many accumulators run side by side.
  static void Mac(__m512& a, __m512i x, const uint32_t* hi,
                  const uint32_t* lo) {
    Mac(a, a, x, hi, lo);
  }
  // Words of P consecutive values x·scale (zero past n): hi[w·step] and
  // lo[w·step].
  static void Words(const float* x, int64_t n, float scale, int64_t words,
                    uint32_t* hi, uint32_t* lo, int64_t step) {
    for (int64_t w = 0; w < words; ++w) {
      uint32_t h = 0, l = 0;
      for (int64_t e = 0; e < 2; ++e) {
        const int64_t c = 2 * w + e;
        const float f = c < n ? x[c] * scale : 0.0f;
        const uint16_t fh = FloatToBFloat16(f);
        const uint16_t fl = FloatToBFloat16(f - ToFloat(fh));
        h |= static_cast<uint32_t>(fh) << (16 * e);
        l |= static_cast<uint32_t>(fl) << (16 * e);
      }
      hi[w * step] = h;
      lo[w * step] = l;
    }
  }
  // The tile's probabilities (16 lanes) as 8 words of position pairs.
  static void ProbabilityWords(__m512 p, uint32_t* hi, uint32_t* lo) {
    const __m256bh h = _mm512_cvtneps_pbh(p);
    const __m512 back = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16));
    const __m256bh l = _mm512_cvtneps_pbh(_mm512_sub_ps(p, back));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), (__m256i)h);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), (__m256i)l);
  }
};

// bf16 caches with the queries and probabilities rounded to bf16 before the
// multiply (FlashAttention's and FlashMLA's choice for bf16): one vdpbf16ps
// per 32 products instead of two; sums stay fp32.
struct Bf16Rounded : Bf16 {
  static constexpr int kDp = 1;
  static void Mac(__m512& a, __m512& /*b*/, __m512i x, const uint32_t* hi,
                  const uint32_t* /*lo*/) {
    a = _mm512_dpbf16_ps(a, (__m512bh)x, (__m512bh)_mm512_set1_epi32(*hi));
  }
  static void Mac(__m512& a, __m512i x, const uint32_t* hi, const uint32_t*) {
    Mac(a, a, x, hi, hi);
  }
};

struct F32 {
  using E = float;
  static constexpr int64_t kPerLane = 1;
  static constexpr int kDp = 1;
  static void Mac(__m512& a, __m512& /*b*/, __m512i x, const uint32_t* w,
                  const uint32_t* /*unused*/) {
    float f;
    std::memcpy(&f, w, 4);
    a = _mm512_fmadd_ps(_mm512_castsi512_ps(x), _mm512_set1_ps(f), a);
  }
  static void Mac(__m512& a, __m512i x, const uint32_t* w, const uint32_t*) {
    Mac(a, a, x, w, w);
  }
  static void Words(const float* x, int64_t n, float scale, int64_t words,
                    uint32_t* hi, uint32_t* lo, int64_t step) {
    for (int64_t w = 0; w < words; ++w) {
      hi[w * step] = lo[w * step] = Bits(w < n ? x[w] * scale : 0.0f);
    }
  }
  static void ProbabilityWords(__m512 p, uint32_t* hi, uint32_t* lo) {
    _mm512_storeu_ps(hi, p);
    _mm512_storeu_ps(lo, p);
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

// hi/lo words of every head, `per_head` apart; word w of head h at
// [h·per_head + w].
struct WordTable {
  std::vector<uint32_t> hi, lo;
  int64_t per_head = 0;
  void Resize(int64_t heads, int64_t words) {
    per_head = words;
    hi.assign(heads * words, 0);
    lo.assign(heads * words, 0);
  }
  uint32_t* Hi(int64_t h) { return &hi[h * per_head]; }
  uint32_t* Lo(int64_t h) { return &lo[h * per_head]; }
  const uint32_t* Hi(int64_t h) const { return &hi[h * per_head]; }
  const uint32_t* Lo(int64_t h) const { return &lo[h * per_head]; }
};

// s[h·16 + i] = shared-key score of position i for the NB heads from h0: one
// key vector per word, loaded once for all heads. Query words are stored
// word-major ([w·H + h]) so that the block's heads are adjacent.
template <class T, int NB>
inline void SharedKeyScores(int64_t h0, int64_t H, const char* tile,
                            int64_t words, const uint32_t* qhi,
                            const uint32_t* qlo, TilePrefetcher& pf, float* s) {
  __m512 a[NB], b[NB];
#pragma GCC unroll 12
  for (int h = 0; h < NB; ++h) a[h] = b[h] = _mm512_setzero_ps();
  const uint32_t *hi = qhi + h0, *lo = qlo + h0;
  for (int64_t w = 0; w < words; ++w, hi += H, lo += H) {
    pf.Issue(LinesFor(NB * T::kDp));
    const __m512i x = _mm512_loadu_si512(tile + w * 64);
#pragma GCC unroll 12
    for (int h = 0; h < NB; ++h) T::Mac(a[h], b[h], x, hi + h, lo + h);
  }
#pragma GCC unroll 12
  for (int h = 0; h < NB; ++h) {
    _mm512_storeu_ps(s + (h0 + h) * 16, _mm512_add_ps(a[h], b[h]));
  }
}

// s[h·16 + i] += latent score of position i, head by head: each head reads
// its own span of the zK tile (byte offset zoff[h]), four words at a time
// into independent accumulators.
template <class T>
inline void LatentKeyScores(int64_t H, const char* tile, const int64_t* zoff,
                            int64_t words, const WordTable& ql, float* s) {
  for (int64_t h = 0; h < H; ++h) {
    const char* base = tile + zoff[h];
    const uint32_t *hi = ql.Hi(h), *lo = ql.Lo(h);
    __m512 a[4], b[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) a[j] = b[j] = _mm512_setzero_ps();
    int64_t w = 0;
    for (; w + 4 <= words; w += 4) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        T::Mac(a[j], b[j], _mm512_loadu_si512(base + (w + j) * 64), hi + w + j,
               lo + w + j);
      }
    }
    for (; w < words; ++w) {
      T::Mac(a[0], b[0], _mm512_loadu_si512(base + w * 64), hi + w, lo + w);
    }
    const __m512 sum = _mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(a[0], b[0]), _mm512_add_ps(a[1], b[1])),
        _mm512_add_ps(_mm512_add_ps(a[2], b[2]), _mm512_add_ps(a[3], b[3])));
    _mm512_storeu_ps(s + h * 16,
                     _mm512_add_ps(_mm512_loadu_ps(s + h * 16), sum));
  }
}

// LatentKeyScores for query heads in groups of G that read one KV head (G =
// H / H_kv, heads h0..h0+G-1 sharing zoff): each latent key vector is loaded
// once for the group instead of once per head, two words at a time into
// independent accumulators (hi and lo into one, as there are G·2 chains).
// Fewer than 4 words go into one chain, as LatentKeyScores does: splitting
// two products over two chains rounds each alone and then their sum, one
// rounding more than an FMA chain, and at r = 2 (stories260K) that extra
// rounding of every latent score took the plane engine's layer-1 error from
// within its bound to 1.01x of it (verify_test's NaiveByName case).
template <class T, int G>
inline void GroupLatentKeyScores(int64_t H, const char* tile,
                                 const int64_t* zoff, int64_t words,
                                 const WordTable& ql, float* s) {
  for (int64_t h0 = 0; h0 < H; h0 += G) {
    const char* base = tile + zoff[h0];
    __m512 a[G][2];
#pragma GCC unroll 4
    for (int q = 0; q < G; ++q) a[q][0] = a[q][1] = _mm512_setzero_ps();
    const int64_t paired = words >= 4 ? words & ~int64_t{1} : 0;
    int64_t w = 0;
    for (; w < paired; w += 2) {
#pragma GCC unroll 2
      for (int j = 0; j < 2; ++j) {
        const __m512i x = _mm512_loadu_si512(base + (w + j) * 64);
#pragma GCC unroll 4
        for (int q = 0; q < G; ++q) {
          T::Mac(a[q][j], x, ql.Hi(h0 + q) + w + j, ql.Lo(h0 + q) + w + j);
        }
      }
    }
    for (; w < words; ++w) {
      const __m512i x = _mm512_loadu_si512(base + w * 64);
#pragma GCC unroll 4
      for (int q = 0; q < G; ++q) {
        T::Mac(a[q][0], x, ql.Hi(h0 + q) + w, ql.Lo(h0 + q) + w);
      }
    }
#pragma GCC unroll 4
    for (int q = 0; q < G; ++q) {
      float* out = s + (h0 + q) * 16;
      _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out),
                                          _mm512_add_ps(a[q][0], a[q][1])));
    }
  }
}

// One value vector: 16 dims (the last vector of a block `mlast` lanes wide
// when kMask) of P positions; `keep` clears the element past the length in the
// half-valid last row (it may hold anything).
template <bool kMask>
inline __m512i LoadValues(const char* at, __mmask16 m, __m512i keep) {
  const __m512i x =
      kMask ? _mm512_maskz_loadu_epi32(m, at) : _mm512_loadu_si512(at);
  return _mm512_and_si512(x, keep);
}

// The row mask: all ones, or the first position of each lane's pair only.
template <class T>
inline __m512i KeepRow(bool half_row) {
  return _mm512_set1_epi32(half_row && T::kPerLane == 2 ? 0xffff : -1);
}

// acc[h][16v + lane] += Σ_k x(k, v) · word_h(k) for NB heads from h0 and NV
// vectors of 16 dims of one value block (row k at base + k·row_bytes), each
// vector loaded once for all NB heads; pace() is called once a row.
// Probability words are head-major ([h·rows_max + k]).
template <class T, int NB, int NV, bool kMask, class Pace>
inline void BlockValues(int64_t h0, const char* base, int64_t row_bytes,
                        int64_t rows, bool half, __mmask16 mlast,
                        const WordTable& pw, float* acc, int64_t per_head,
                        Pace&& pace) {
  __m512 a[NB][NV];
#pragma GCC unroll 12
  for (int h = 0; h < NB; ++h) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      a[h][v] = _mm512_maskz_loadu_ps(kMask && v == NV - 1 ? mlast : 0xffff,
                                      acc + (h0 + h) * per_head + 16 * v);
    }
  }
  const uint32_t *hi = pw.Hi(h0), *lo = pw.Lo(h0);
  constexpr int64_t stride = kCacheTile / T::kPerLane;  // = pw.per_head
  for (int64_t k = 0; k < rows; ++k) {
    const char* at = base + k * row_bytes;
    const __m512i keep = KeepRow<T>(half && k == rows - 1);
    pace();
    __m512i x[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      x[v] = LoadValues<kMask>(at + 64 * v, v == NV - 1 ? mlast : 0xffff, keep);
    }
#pragma GCC unroll 12
    for (int h = 0; h < NB; ++h) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        T::Mac(a[h][v], x[v], hi + h * stride + k, lo + h * stride + k);
      }
    }
  }
#pragma GCC unroll 12
  for (int h = 0; h < NB; ++h) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      _mm512_mask_storeu_ps(acc + (h0 + h) * per_head + 16 * v,
                            kMask && v == NV - 1 ? mlast : 0xffff, a[h][v]);
    }
  }
}

// The shared value's columns [c0, c0 + 16·NV) for NB heads from h0, with a
// few prefetch lines a row.
template <class T, int NB, int NV, bool kMask>
inline void SharedValues(int64_t h0, const char* tile, int64_t row_bytes,
                         int64_t rows, bool half, int64_t c0, __mmask16 mlast,
                         const WordTable& pw, float* acc, int64_t per_head,
                         TilePrefetcher& pf) {
  BlockValues<T, NB, NV, kMask>(
      h0, tile + c0 * 4, row_bytes, rows, half, mlast, pw, acc + c0, per_head,
      [&pf] { pf.Issue(LinesFor(NB * NV * T::kDp)); });
}

// The same for each head's own latent values (byte offset voff[h] of the zV
// tile), head by head with NV ≤ 4 vectors.
template <class T, int NV, bool kMask>
inline void HeadValues(int64_t H, const char* tile, int64_t row_bytes,
                       int64_t rows, bool half, const int64_t* voff, int64_t c0,
                       __mmask16 mlast, const WordTable& pw, float* acc,
                       int64_t per_head, TilePrefetcher& pf) {
  for (int64_t h = 0; h < H; ++h) {
    const uint32_t *hi = pw.Hi(h), *lo = pw.Lo(h);
    float* out = acc + h * per_head + c0;
    __m512 a[NV], b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      a[v] = _mm512_maskz_loadu_ps(kMask && v == NV - 1 ? mlast : 0xffff,
                                   out + 16 * v);
      b[v] = _mm512_setzero_ps();
    }
    const char* base = tile + voff[h] + c0 * 4;
    for (int64_t k = 0; k < rows; ++k) {
      const char* at = base + k * row_bytes;
      const __m512i keep = KeepRow<T>(half && k == rows - 1);
      pf.Pace();
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const __m512i x =
            LoadValues<kMask>(at + 64 * v, v == NV - 1 ? mlast : 0xffff, keep);
        T::Mac(a[v], b[v], x, hi + k, lo + k);
      }
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      _mm512_mask_storeu_ps(out + 16 * v, kMask && v == NV - 1 ? mlast : 0xffff,
                            _mm512_add_ps(a[v], b[v]));
    }
  }
}

// HeadValues for query heads in groups of G that read one KV head (voff
// shared): each latent value vector is loaded once for the group; one Pace()
// per group and row.
template <class T, int NV, bool kMask, int G>
inline void GroupHeadValues(int64_t H, const char* tile, int64_t row_bytes,
                            int64_t rows, bool half, const int64_t* voff,
                            int64_t c0, __mmask16 mlast, const WordTable& pw,
                            float* acc, int64_t per_head, TilePrefetcher& pf) {
  for (int64_t h0 = 0; h0 < H; h0 += G) {
    BlockValues<T, G, NV, kMask>(h0, tile + voff[h0] + c0 * 4, row_bytes, rows,
                                 half, mlast, pw, acc + c0, per_head,
                                 [&pf] { pf.Pace(); });
  }
}

// Calls f(integral_constant<int, NV>, integral_constant<bool, kMask>, c0,
// mask) over column blocks of up to `max_nv` vectors covering `width` dims.
template <int kMaxNv, class F>
void ForColumnBlocks(int64_t width, F&& f) {
  for (int64_t c0 = 0; c0 < width; c0 += 16 * kMaxNv) {
    const int64_t left = std::min<int64_t>(width - c0, 16 * kMaxNv);
    const int64_t nv = (left + 15) / 16, last = left - 16 * (nv - 1);
    const auto m = static_cast<__mmask16>((1u << last) - 1);
    auto call = [&](auto nvc) {
      if (last == 16) {
        f(nvc, std::false_type(), c0, m);
      } else {
        f(nvc, std::true_type(), c0, m);
      }
    };
    switch (nv) {
      case 1:
        call(std::integral_constant<int, 1>());
        break;
      case 2:
        if constexpr (kMaxNv >= 2) call(std::integral_constant<int, 2>());
        break;
      case 3:
        if constexpr (kMaxNv >= 3) call(std::integral_constant<int, 3>());
        break;
      default:
        if constexpr (kMaxNv >= 4) call(std::integral_constant<int, 4>());
        break;
    }
  }
}

template <class T>
void FactoredTiled(const FactoredDecodeParams& p) {
  using E = typename T::E;
  constexpr int64_t P = T::kPerLane;
  constexpr int64_t es = sizeof(E);
  constexpr int64_t kRows = kCacheTile / P;  // value rows per tile
  const int64_t H = p.heads, g = H / p.kv_heads, n = p.dim, r = p.rank;
  // Chunks of at least 1024 positions where the threads stay busy without
  // splitting further: a chunk's first kPrefetchTiles tiles are not prefetched
  // by its loop, and a chunk has setup and merge work. At L = 512 (b = 4, 2
  // threads, timed alternately) that took the step to 0.83-0.92 of the time
  // with 256-position chunks, at L = 1024 0.95.
  const int64_t threads = omp_get_max_threads();
  const int64_t splits =
      std::min(SplitsFor(p.batch, p.length),
               std::max(std::max<int64_t>(1, p.length / 1024),
                        (threads + p.batch - 1) / p.batch));
  const int64_t chunk = ((p.length + splits - 1) / splits + kCacheTile - 1) /
                        kCacheTile * kCacheTile;
  const int64_t items = p.batch * splits;
  const int64_t per_head = n + r;
  std::vector<HeadState> states(items * H);
  std::vector<float> accs(items * H * per_head, 0.0f);
  // Key words: the shared key's, and per head its KV head's span of the zK
  // tile (the same count for every head, shifted to stay inside the tile).
  const int64_t kwords = p.k.stride / P;
  const int64_t zwords = r > 0 ? p.zk.stride / P : 0;
  int64_t lwords = 0;
  for (int64_t kvh = 0; kvh < p.kv_heads && r > 0; ++kvh) {
    lwords = std::max(lwords, (kvh * r + r - 1) / P - kvh * r / P + 1);
  }
  std::vector<int64_t> zfirst(H), zoff(H), voff(H);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kvh = h / g;
    zfirst[h] = std::min(kvh * r / P, zwords - lwords);
    zoff[h] = zfirst[h] * 64;
    voff[h] = kvh * r * 4;
  }
  // Bytes of one tile, per segment (k, zK, v, zV: the order they are read).
  const int64_t tile_k = kCacheTile * p.k.stride * es;
  const int64_t tile_v = kCacheTile * p.v.stride * es;
  const int64_t tile_zk = kCacheTile * p.zk.stride * es;
  const int64_t tile_zv = kCacheTile * p.zv.stride * es;
  const char* kb = static_cast<const char*>(p.k.data);
  const char* vb = static_cast<const char*>(p.v.data);
  const char* zkb = static_cast<const char*>(p.zk.data);
  const char* zvb = static_cast<const char*>(p.zv.data);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t b = item / splits, split = item % splits;
    const int64_t t0 = split * chunk, t1 = std::min(p.length, t0 + chunk);
    if (t0 >= t1) continue;
    // Shared-key words word-major ([w·H + h]), latent words head-major.
    std::vector<uint32_t> qhi(kwords * H), qlo(kwords * H);
    WordTable ql, pw;
    ql.Resize(H, lwords);
    pw.Resize(H, kRows);
    std::vector<float> lat(lwords * P);
    for (int64_t h = 0; h < H; ++h) {
      T::Words(p.q + (b * H + h) * n, n, p.scale, kwords, &qhi[h], &qlo[h], H);
      if (r == 0) continue;
      // The head's latent query placed at its dims' positions in the span.
      const int64_t first_dim = zfirst[h] * P, own = (h / g) * r;
      for (int64_t i = 0; i < lwords * P; ++i) {
        const int64_t c = first_dim + i - own;
        lat[i] = c >= 0 && c < r ? p.q_latent[(b * H + h) * r + c] : 0.0f;
      }
      T::Words(lat.data(), lwords * P, p.scale, lwords, ql.Hi(h), ql.Lo(h), 1);
    }
    TilePrefetcher pf;
    HeadState* st = &states[item * H];
    float* acc = &accs[item * H * per_head];
    std::vector<float> scores(H * kCacheTile);
    const float* sigma =
        p.sigma != nullptr ? p.sigma + b * p.capacity * p.kv_heads : nullptr;
    for (int64_t t = t0; t < t1; t += kCacheTile) {
      const int64_t count = std::min(kCacheTile, t1 - t);
      const int64_t pos = b * p.capacity + t;  // first position of the tile
      const char* ktile = kb + pos * p.k.stride * es;
      {
        // Addresses past the sequence are harmless to prefetch (no fault).
        const int64_t ahead = pos + kPrefetchTiles * kCacheTile;
        const char* base[4] = {
            kb + ahead * p.k.stride * es, zkb + ahead * p.zk.stride * es,
            vb + ahead * p.v.stride * es, zvb + ahead * p.zv.stride * es};
        const int64_t bytes[4] = {tile_k, r > 0 ? tile_zk : 0, tile_v,
                                  r > 0 ? tile_zv : 0};
        pf.Start(base, bytes);
      }
      ForHeadBlocks(H, [&](auto nb, int64_t h0) {
        SharedKeyScores<T, decltype(nb)::value>(
            h0, H, ktile, kwords, qhi.data(), qlo.data(), pf, scores.data());
      });
      if (r > 0) {
        const char* ztile = zkb + pos * p.zk.stride * es;
        if (g == 2) {
          GroupLatentKeyScores<T, 2>(H, ztile, zoff.data(), lwords, ql,
                                     scores.data());
        } else if (g == 4) {
          GroupLatentKeyScores<T, 4>(H, ztile, zoff.data(), lwords, ql,
                                     scores.data());
        } else {
          LatentKeyScores<T>(H, ztile, zoff.data(), lwords, ql, scores.data());
        }
      }
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
          const float corr = RaiseMax(&st[h], m);
          pv = VExp(_mm512_sub_ps(sv, _mm512_set1_ps(m)));
          st[h].l += _mm512_reduce_add_ps(pv);
          if (corr != 1.0f) {
            float* a = acc + h * per_head;
            for (int64_t c = 0; c < per_head; ++c) a[c] *= corr;
          }
        }
        T::ProbabilityWords(pv, pw.Hi(h), pw.Lo(h));
        pf.Issue(8);
      }
      // Rows of P positions that hold a valid one; an odd count leaves half
      // of the last row past the length.
      const int64_t rows = (count + P - 1) / P;
      const bool half = count % P != 0;
      const char* vtile = vb + pos * p.v.stride * es;
      ForColumnBlocks<2>(n, [&](auto nvc, auto maskc, int64_t c0, __mmask16 m) {
        ForHeadBlocks(H, [&](auto nb, int64_t h0) {
          SharedValues<T, decltype(nb)::value, decltype(nvc)::value,
                       decltype(maskc)::value>(h0, vtile, P * p.v.stride * es,
                                               rows, half, c0, m, pw, acc,
                                               per_head, pf);
        });
      });
      if (r > 0) {
        const char* zvtile = zvb + pos * p.zv.stride * es;
        // Query heads that read one KV head load its values once (g of 2
        // or 4); the prefetcher paces one call per group, row and block.
        const int64_t groups = g == 2 || g == 4 ? H / g : H;
        pf.Spread(groups * rows * ((r + 63) / 64));
        ForColumnBlocks<4>(
            r, [&](auto nvc, auto maskc, int64_t c0, __mmask16 m) {
              constexpr int kNv = decltype(nvc)::value;
              constexpr bool kM = decltype(maskc)::value;
              const int64_t row_bytes = P * p.zv.stride * es;
              if (g == 2) {
                GroupHeadValues<T, kNv, kM, 2>(H, zvtile, row_bytes, rows, half,
                                               voff.data(), c0, m, pw, acc + n,
                                               per_head, pf);
              } else if (g == 4) {
                GroupHeadValues<T, kNv, kM, 4>(H, zvtile, row_bytes, rows, half,
                                               voff.data(), c0, m, pw, acc + n,
                                               per_head, pf);
              } else {
                HeadValues<T, kNv, kM>(H, zvtile, row_bytes, rows, half,
                                       voff.data(), c0, m, pw, acc + n,
                                       per_head, pf);
              }
            });
      }
      pf.Finish();
    }
  }
  MergeAllChunks(states, accs, p.batch, splits, H, n, r, p.out, p.out_latent);
}

}  // namespace

void FactoredTiledImpl(const FactoredDecodeParams& p) {
  if (p.dtype == CacheDType::kF32) {
    FactoredTiled<F32>(p);
  } else if (p.bf16_operands) {
    FactoredTiled<Bf16Rounded>(p);
  } else {
    FactoredTiled<Bf16>(p);
  }
}

}  // namespace lrkv::kernels::avx512bf16
