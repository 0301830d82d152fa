// MHA/GQA decode over a position-major cache ([B, capacity, H_kv, d_h], the
// decode engines' layout) with G query heads per KV head: decode_impl.h's Mha
// for the shapes this serves (SIMD builds, d_h a multiple of the vector width,
// G a divisor of it up to 8). Two things differ from the general kernel:
// - a work item is (sequence, chunk of positions) with every KV head, so it
//   reads the cache as one sequential run of whole positions; the general
//   kernel's (sequence, KV head) items read d_h of every H_kv·d_h elements,
//   a strided walk;
// - each key and value row is loaded and widened once for the G heads that
//   read it, scores are summed for kW/G positions at a time in one transposed
//   reduction, and the value sums of the G heads stay in registers across a
//   tile.
// At the Qwen3-0.6B shape (16 heads, 8 KV heads, d_h 128, bf16, 8 sequences,
// L = 512, 2 threads) the attention of a step took 19-20 ms against 27-28 ms.
// Include only from decode_impl.h, after decode_simd.h.
#include <algorithm>
#include <vector>

namespace lrkv::kernels::LRKV_KERNEL_NS {
namespace {

#ifdef LRKV_KERNEL_SIMD
// Chunks per sequence when an item carries every KV head: two items per thread
// where chunks of 128 positions allow it, else one per thread down to chunks of
// 64 (fewer, longer items read longer runs; too few leave a thread idle).
inline int64_t GroupedSplits(int64_t batch, int64_t length) {
  const int64_t threads = omp_get_max_threads();
  auto splits = [&](int64_t per_thread, int64_t min_chunk) {
    return std::max<int64_t>(
        1, std::min<int64_t>((per_thread * threads + batch - 1) / batch,
                             length / min_chunk));
  };
  return std::max(splits(2, 128), splits(1, 64));
}

// Requests the n elements at `row`, kTile positions (`step` elements each)
// ahead, from memory into L1: a line at a time beside the loads that use the
// current tile, as the weight mat-vec does, so that the loads find their lines
// there. One core reading the Qwen3-0.6B shape's caches (8 sequences, L = 512)
// took 0.81 of the time with it; two, 0.93. (Past the cache's end a prefetch
// touches nothing: it does not fault.)
template <typename E>
inline void PrefetchNextTile(const E* row, int64_t step, int64_t n) {
  const char* ahead = reinterpret_cast<const char*>(row + kTile * step);
  for (int64_t byte = 0; byte < n * int64_t{sizeof(E)}; byte += 64)
    __builtin_prefetch(ahead + byte, 0, 3);
}

// s[h·kTile + i] = q_h · K_i for the G heads of one KV head (queries q, G rows
// of dh) and `count` ≤ kTile positions from `k` (`step` elements apart): kW/G
// positions at a time, each key vector loaded once for the G heads, the kW
// sums reduced together. Rows past `count` repeat the last one (their sums are
// dropped), so the block needs no tail.
template <int G, typename E>
inline void GroupScores(const float* q, const E* k, int64_t step, int64_t count,
                        int64_t dh, float* s) {
  constexpr int P = kW / G;
  for (int64_t i0 = 0; i0 < count; i0 += P) {
    const E* rows[P];
    for (int i = 0; i < P; ++i) {
      rows[i] = k + std::min<int64_t>(i0 + i, count - 1) * step;
      PrefetchNextTile(rows[i], step, dh);
    }
    Vf a[kW];
#pragma GCC unroll 16
    for (int j = 0; j < kW; ++j) a[j] = VZero();
    for (int64_t c = 0; c < dh; c += kW) {
      Vf qv[G];
#pragma GCC unroll 8
      for (int h = 0; h < G; ++h) qv[h] = VLoad(q + h * dh + c);
#pragma GCC unroll 16
      for (int i = 0; i < P; ++i) {
        const Vf x = VLoad(rows[i] + c);
#pragma GCC unroll 8
        for (int h = 0; h < G; ++h) a[i * G + h] = VFma(qv[h], x, a[i * G + h]);
      }
    }
    alignas(64) float sums[kW];
    VSumMany(a, sums);
    for (int i = 0; i < P && i0 + i < count; ++i) {
      for (int h = 0; h < G; ++h) s[h * kTile + i0 + i] = sums[i * G + h];
    }
  }
}

// acc[h·dh + c0 + ...] += Σ_t w[h·kTile + t] · V_t for VB vectors of columns
// from c0, the G heads' sums held in registers over the tile's rows.
template <int G, int VB, typename E>
inline void GroupValueBlock(float* acc, const float* w, const E* v,
                            int64_t step, int64_t count, int64_t dh,
                            int64_t c0) {
  Vf a[G][VB];
#pragma GCC unroll 8
  for (int h = 0; h < G; ++h) {
#pragma GCC unroll 8
    for (int u = 0; u < VB; ++u) a[h][u] = VLoad(acc + h * dh + c0 + u * kW);
  }
  for (int64_t t = 0; t < count; ++t) {
    const E* row = v + t * step + c0;
    PrefetchNextTile(row, step, VB * kW);
    Vf weight[G];
#pragma GCC unroll 8
    for (int h = 0; h < G; ++h) weight[h] = VSet(w[h * kTile + t]);
#pragma GCC unroll 8
    for (int u = 0; u < VB; ++u) {
      const Vf x = VLoad(row + u * kW);
#pragma GCC unroll 8
      for (int h = 0; h < G; ++h) a[h][u] = VFma(weight[h], x, a[h][u]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < G; ++h) {
#pragma GCC unroll 8
    for (int u = 0; u < VB; ++u) VStore(acc + h * dh + c0 + u * kW, a[h][u]);
  }
}

// The tile's weighted value rows into the G heads' sums: blocks of as many
// vectors as keep G·VB sums in registers (16 of AVX-512's 32, 8 of AVX2's 16).
template <int G, typename E>
inline void GroupValues(float* acc, const float* w, const E* v, int64_t step,
                        int64_t count, int64_t dh) {
  constexpr int VB = std::max(1, std::min(8, static_cast<int>(kW) / G));
  int64_t c0 = 0;
  for (; c0 + VB * kW <= dh; c0 += VB * kW)
    GroupValueBlock<G, VB>(acc, w, v, step, count, dh, c0);
  for (; c0 < dh; c0 += kW)
    GroupValueBlock<G, 1>(acc, w, v, step, count, dh, c0);
}

template <typename E, int G>
void MhaGrouped(const MhaDecodeParams& p) {
  const int64_t dh = p.head_dim, pairs = p.batch * p.kv_heads;
  const int64_t splits = GroupedSplits(p.batch, p.length);
  const int64_t chunk = (p.length + splits - 1) / splits;
  // Partial state per (sequence, KV head, chunk, head of the group), as
  // MergeAllChunks reads them.
  std::vector<HeadState> states(pairs * splits * G);
  std::vector<float> accs(pairs * splits * G * dh, 0.0f);
  const int64_t step = p.Offset(0, 0, 1);  // elements between positions
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < p.batch * splits; ++item) {
    const int64_t b = item / splits, split = item % splits;
    const int64_t t0 = split * chunk, t1 = std::min(p.LengthOf(b), t0 + chunk);
    if (t0 >= t1) continue;  // past a shorter sequence's end
    const E* k = static_cast<const E*>(p.KeysOf(b));
    const E* v = static_cast<const E*>(p.ValuesOf(b));
    std::vector<float> q(p.heads * dh);  // the sequence's queries, pre-scaled
    for (int64_t i = 0; i < p.heads * dh; ++i)
      q[i] = p.q[b * p.heads * dh + i] * p.scale;
    alignas(64) float s[G * kTile], w[G * kTile];
    for (int64_t t = t0; t < t1; t += kTile) {
      const int64_t count = std::min(kTile, t1 - t);
      for (int64_t kvh = 0; kvh < p.kv_heads; ++kvh) {
        const int64_t at = (b * p.kv_heads + kvh) * splits + split;
        HeadState* st = &states[at * G];
        float* acc = &accs[at * G * dh];
        GroupScores<G>(q.data() + kvh * G * dh, k + t * step + kvh * dh, step,
                       count, dh, s);
        for (int h = 0; h < G; ++h) {
          SoftmaxTile(&st[h], &s[h * kTile], count, &w[h * kTile], acc + h * dh,
                      dh, nullptr, 0);
        }
        GroupValues<G>(acc, w, v + t * step + kvh * dh, step, count, dh);
      }
    }
  }
  MergeAllChunks(states, accs, pairs, splits, G, dh, 0, p.out, nullptr);
}

// MhaGrouped where it serves p's shape (true); false, having done nothing,
// elsewhere.
template <typename E>
bool TryMhaGrouped(const MhaDecodeParams& p) {
  if (!p.position_major || p.head_dim % kW != 0) return false;
  switch (p.heads / p.kv_heads) {
    case 1:
      MhaGrouped<E, 1>(p);
      return true;
    case 2:
      MhaGrouped<E, 2>(p);
      return true;
    case 4:
      MhaGrouped<E, 4>(p);
      return true;
    case 8:
      MhaGrouped<E, 8>(p);
      return true;
    default:
      return false;
  }
}
#endif

}  // namespace
}  // namespace lrkv::kernels::LRKV_KERNEL_NS
