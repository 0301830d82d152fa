// The decode kernels over block-quantized caches (Q8_0 / Q4_0,
// decode_params.h): the same flash-decoding as decode_impl.h's Mha and Factored
// (chunks of positions in parallel, tiles of kTile positions with an online
// softmax, chunks merged at the end), reading the cache's blocks directly. Each
// tile's rows are widened from their blocks into a small fp32 buffer (kTile
// rows, in L1) once, and every head that reads a row takes it from there
// through the fp32 dot and sum routines: a Q8_0 cache moves 34 bytes per 32
// values where bf16 moves 64, and no step makes a dequantized copy of the
// cache. Reconstruct mode and the tiled layout have no quantized form
// (ValidateFactored refuses them). Include only from decode_impl.h.
#include <immintrin.h>

#include <cstring>

#include "base/dtype.h"

namespace lrkv::kernels::LRKV_KERNEL_NS {
namespace {

inline float HalfScale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
#ifdef __F16C__
  return _cvtsh_ss(h);
#else
  return HalfToFloat(h);
#endif
}

// Widens `blocks` blocks of type T at src into out (32 floats each), as
// DequantizeBlocks (base/block_quant.h) does: d · q, or d · (nibble − 8).
// Vectorized where the ISA build has the widening converts: the scalar loops
// left the q4 nibble split unvectorized, and a q4 step ran 2x a bf16 one.
template <CacheDType T>
inline void WidenBlocks(const uint8_t* src, int64_t blocks, float* out) {
  constexpr int64_t bytes = CacheBytes(T, kQuantBlock);
  for (int64_t blk = 0; blk < blocks; ++blk, src += bytes, out += kQuantBlock) {
    const float d = HalfScale(src);
    const uint8_t* q = src + 2;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    const __m512 vd = _mm512_set1_ps(d);
    if constexpr (T == CacheDType::kQ8_0) {
      for (int i = 0; i < 32; i += 16) {
        const __m128i b =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
        _mm512_storeu_ps(
            out + i,
            _mm512_mul_ps(vd, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b))));
      }
    } else {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
      const __m128i mask = _mm_set1_epi8(0x0f);
      const __m512 eight = _mm512_set1_ps(8.0f);
      const __m128i lo = _mm_and_si128(b, mask);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
      _mm512_storeu_ps(
          out,
          _mm512_mul_ps(
              vd, _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)),
                                eight)));
      _mm512_storeu_ps(
          out + 16,
          _mm512_mul_ps(
              vd, _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)),
                                eight)));
    }
#elif defined(__AVX2__)
    const __m256 vd = _mm256_set1_ps(d);
    if constexpr (T == CacheDType::kQ8_0) {
      for (int i = 0; i < 32; i += 8) {
        const __m128i b =
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
        _mm256_storeu_ps(
            out + i,
            _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))));
      }
    } else {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
      const __m128i mask = _mm_set1_epi8(0x0f);
      const __m256 eight = _mm256_set1_ps(8.0f);
      const __m128i halves[2] = {_mm_and_si128(b, mask),
                                 _mm_and_si128(_mm_srli_epi16(b, 4), mask)};
      for (int h = 0; h < 2; ++h) {
        const __m128i parts[2] = {halves[h], _mm_srli_si128(halves[h], 8)};
        for (int i = 0; i < 2; ++i) {
          const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]));
          _mm256_storeu_ps(out + 16 * h + 8 * i,
                           _mm256_mul_ps(vd, _mm256_sub_ps(x, eight)));
        }
      }
    }
#else
    if constexpr (T == CacheDType::kQ8_0) {
      const auto* v = reinterpret_cast<const int8_t*>(q);
      for (int i = 0; i < 32; ++i) out[i] = d * v[i];
    } else {
      for (int i = 0; i < 16; ++i) {
        out[i] = d * ((q[i] & 0xf) - 8);
        out[16 + i] = d * ((q[i] >> 4) - 8);
      }
    }
#endif
  }
}

template <CacheDType T>
void MhaQuantized(const MhaDecodeParams& p) {
  const int64_t g = p.heads / p.kv_heads, dh = p.head_dim;
  const int64_t pairs = p.batch * p.kv_heads;
  const int64_t splits = SplitsFor(pairs, p.length);
  const int64_t chunk = (p.length + splits - 1) / splits;
  const int64_t step =
      CacheBytes(T, p.Offset(0, 0, 1));  // bytes between positions
  std::vector<HeadState> states(pairs * splits * g);
  std::vector<float> accs(pairs * splits * g * dh, 0.0f);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < pairs * splits; ++item) {
    const int64_t pair = item / splits, split = item % splits;
    const int64_t b = pair / p.kv_heads, kvh = pair % p.kv_heads;
    const int64_t t0 = split * chunk, t1 = std::min(p.LengthOf(b), t0 + chunk);
    const int64_t head = CacheBytes(T, p.Offset(0, kvh, 0));
    const auto* k = static_cast<const uint8_t*>(p.KeysOf(b)) + head;
    const auto* v = static_cast<const uint8_t*>(p.ValuesOf(b)) + head;
    std::vector<float> q(g * dh);
    for (int64_t i = 0; i < g * dh; ++i)
      q[i] = p.q[(b * p.heads + kvh * g) * dh + i] * p.scale;
    HeadState* st = &states[item * g];
    float* acc = &accs[item * g * dh];
    std::vector<float> rows_f(kTile * dh);
    float s[kTile * 64], w[kTile], dots[64];
    const float* rows[kTile];
    for (int64_t t = t0; t < t1; t += kTile) {
      const int64_t count = std::min(kTile, t1 - t);
      for (int64_t i = 0; i < count; ++i) {
        WidenBlocks<T>(k + (t + i) * step, dh / kQuantBlock, &rows_f[i * dh]);
        rows[i] = &rows_f[i * dh];
      }
      if (g < 4) {
        for (int64_t h = 0; h < g; ++h)
          DotRows(q.data() + h * dh, rows, count, dh, &s[h * kTile]);
      } else {
        for (int64_t i = 0; i < count; ++i) {
          MultiDot(q.data(), g, rows[i], dh, dots);
          for (int64_t h = 0; h < g; ++h) s[h * kTile + i] = dots[h];
        }
      }
      for (int64_t i = 0; i < count; ++i)
        WidenBlocks<T>(v + (t + i) * step, dh / kQuantBlock, &rows_f[i * dh]);
      for (int64_t h = 0; h < g; ++h) {
        SoftmaxTile(&st[h], &s[h * kTile], count, w, acc + h * dh, dh, nullptr,
                    0);
        AccumulateRows(acc + h * dh, w, rows, count, dh);
      }
    }
  }
  MergeAllChunks(states, accs, pairs, splits, g, dh, 0, p.out, nullptr);
}

// Widens rows t..t+count-1 of a segment (`width` values of rows `stride`
// apart) into out, `width` floats each.
template <CacheDType T>
void WidenTile(const uint8_t* seq, int64_t stride, int64_t width, int64_t t,
               int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    WidenBlocks<T>(seq + (t + i) * CacheBytes(T, stride), width / kQuantBlock,
                   out + i * width);
  }
}

template <CacheDType T>
void FactoredQuantized(const FactoredDecodeParams& p) {
  const int64_t H = p.heads, g = H / p.kv_heads, n = p.dim, r = p.rank;
  const int64_t lw = p.kv_heads * r;  // latent row width
  const int64_t splits = SplitsFor(p.batch, p.length);
  const int64_t chunk = (p.length + splits - 1) / splits;
  const int64_t items = p.batch * splits;
  const int64_t per_head = n + r;
  std::vector<HeadState> states(items * H);
  std::vector<float> accs(items * H * per_head, 0.0f);
  const bool same_kv = p.k.data == p.v.data && p.k.stride == p.v.stride;
  const bool same_z = p.zk.data == p.zv.data && p.zk.stride == p.zv.stride;
  auto seq_of = [&](const CacheSegment& s, int64_t b) {
    return static_cast<const uint8_t*>(s.data) +
           b * p.capacity * CacheBytes(T, s.stride);
  };
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t b = item / splits, split = item % splits;
    const int64_t t0 = split * chunk, t1 = std::min(p.length, t0 + chunk);
    const float* sigma =
        p.sigma != nullptr ? p.sigma + b * p.capacity * p.kv_heads : nullptr;
    std::vector<float> q(H * n), ql(H * r);
    for (int64_t i = 0; i < H * n; ++i) q[i] = p.q[b * H * n + i] * p.scale;
    for (int64_t i = 0; i < H * r; ++i)
      ql[i] = p.q_latent[b * H * r + i] * p.scale;
    HeadState* st = &states[item * H];
    float* acc = &accs[item * H * per_head];
    std::vector<float> s(H * kTile), w(H * kTile), dots(std::max(H, g));
    std::vector<float> shared(kTile * n), latent(kTile * lw);
    const float* rows[kTile];
    for (int64_t t = t0; t < t1; t += kTile) {
      const int64_t count = std::min(kTile, t1 - t);
      // Scores: the shared key once for all H heads, then each KV head's
      // latent key for its g heads.
      WidenTile<T>(seq_of(p.k, b), p.k.stride, n, t, count, shared.data());
      if (r > 0)
        WidenTile<T>(seq_of(p.zk, b), p.zk.stride, lw, t, count, latent.data());
      for (int64_t i = 0; i < count; ++i) {
        MultiDot(q.data(), H, &shared[i * n], n, dots.data());
        for (int64_t h = 0; h < H; ++h) s[h * kTile + i] = dots[h];
        for (int64_t kvh = 0; kvh < p.kv_heads && r > 0; ++kvh) {
          MultiDot(ql.data() + kvh * g * r, g, &latent[i * lw + kvh * r], r,
                   dots.data());
          for (int64_t j = 0; j < g; ++j)
            s[(kvh * g + j) * kTile + i] += dots[j];
        }
        if (sigma != nullptr) {
          for (int64_t h = 0; h < H; ++h)
            s[h * kTile + i] *= sigma[(t + i) * p.kv_heads + h / g];
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        float* a = acc + h * per_head;
        SoftmaxTile(&st[h], &s[h * kTile], count, &w[h * kTile], a, n, a + n,
                    r);
      }
      // Sums: a · V_shared, then a · Z_V per KV head. Absorbed MLA reads one
      // segment as key and value: its widened rows are already in place.
      if (!same_kv)
        WidenTile<T>(seq_of(p.v, b), p.v.stride, n, t, count, shared.data());
      for (int64_t i = 0; i < count; ++i) rows[i] = &shared[i * n];
      for (int64_t h = 0; h < H; ++h)
        AccumulateRows(acc + h * per_head, &w[h * kTile], rows, count, n);
      if (r == 0) continue;
      if (!same_z)
        WidenTile<T>(seq_of(p.zv, b), p.zv.stride, lw, t, count, latent.data());
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < count; ++i)
          rows[i] = &latent[i * lw + (h / g) * r];
        AccumulateRows(acc + h * per_head + n, &w[h * kTile], rows, count, r);
      }
    }
  }
  MergeAllChunks(states, accs, p.batch, splits, H, n, r, p.out, p.out_latent);
}

}  // namespace
}  // namespace lrkv::kernels::LRKV_KERNEL_NS
