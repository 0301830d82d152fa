// Every decode kernel (AVX2 and generic builds) against its naive float64
// reference, over many shapes: L = 1, L not a multiple of the tile, chunked
// long contexts, r = 0, r = d_h, H_kv < H, b > 1, QK-norm scales, MLA-style
// shared latents. Tolerances: fp32 caches max|Δ|/max|ref| <= 1e-5; bf16 caches
// cosine distance <= 1e-5 (both sides read the same bf16 cache).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cache_layout.h"
#include "kernels/decode_attention.h"
#include "tests/kernels/isa_test.h"
#include "tests/kernels/kernel_test_util.h"

namespace lrkv::kernels {
namespace {

// Random cache contents in the requested storage type.
struct Cache {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  const void* data(CacheDType t) const {
    return t == CacheDType::kF32 ? static_cast<const void*>(f32.data())
                                 : bf16.data();
  }
};

Cache RandomCache(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist;
  Cache c;
  c.f32.resize(n);
  c.bf16.resize(n);
  for (size_t i = 0; i < n; ++i) {
    c.f32[i] = dist(rng);
    c.bf16[i] = FloatToBFloat16(c.f32[i]);
  }
  return c;
}

using testing::RandomNormals;

void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref,
                 CacheDType t, const std::string& what) {
  testing::ExpectClose(got, ref, t == CacheDType::kBF16, what);
}

// Every implementation this CPU can run: the best one, AVX2, and generic.
class KernelTest : public testing::IsaTest {};

TEST_P(KernelTest, MhaAndGqaMatchTheReference) {
  std::mt19937 rng(1);
  struct Shape {
    int64_t b, h, hkv, dh, length, capacity;
  } shapes[] = {{1, 4, 4, 64, 1, 1},
                {2, 8, 2, 32, 37, 40},
                {3, 12, 12, 128, 300, 300},
                {1, 6, 1, 16, 1025, 1100},
                {4, 4, 2, 8, 17, 17},
                {1, 2, 2, 20, 700, 701},
                // Position-major shapes the grouped kernel serves
                // (decode_mha_grouped.h): 2, 4 and 8 heads per KV head, a
                // partial last tile, one chunk and several.
                {1, 16, 8, 128, 513, 520},
                {2, 32, 8, 64, 130, 140},
                {3, 16, 2, 32, 33, 33},
                {1, 8, 8, 16, 1, 4}};
  for (const auto& s : shapes) {
    for (CacheDType t : {CacheDType::kF32, CacheDType::kBF16}) {
      const size_t kv = s.b * s.hkv * s.capacity * s.dh;
      const Cache k = RandomCache(kv, rng), v = RandomCache(kv, rng);
      const auto q = RandomNormals(s.b * s.h * s.dh, rng);
      std::vector<float> out(s.b * s.h * s.dh), ref(out.size());
      MhaDecodeParams p =
          testing::MhaParamsOf(s.b, s.h, s.hkv, s.dh, s.length, s.capacity, t);
      p.k = k.data(t);
      p.v = v.data(t);
      p.q = q.data();
      p.out = out.data();
      ASSERT_TRUE(MhaDecode(p).ok());
      p.out = ref.data();
      ASSERT_TRUE(MhaDecodeReference(p).ok());
      ExpectClose(out, ref, t, "mha L=" + std::to_string(s.length));
      // The same buffers read position-major ([B, capacity, H_kv, d_h]).
      p.position_major = true;
      p.out = out.data();
      ASSERT_TRUE(MhaDecode(p).ok());
      p.out = ref.data();
      ASSERT_TRUE(MhaDecodeReference(p).ok());
      ExpectClose(out, ref, t,
                  "mha position-major L=" + std::to_string(s.length));
    }
  }
}

// A batched step's caches: each sequence its own block with its own length
// (the decode engines' caches, read in one call). Shapes the grouped kernel
// serves (G = 2, 4) and one it does not (G = 3), sequences shorter than a chunk
// of the longest, and one of a single position.
TEST_P(KernelTest, MhaReadsEachSequencesOwnCache) {
  std::mt19937 rng(7);
  struct Shape {
    int64_t h, hkv, dh;
    std::vector<int64_t> lengths;
  } shapes[] = {{16, 8, 128, {513, 40, 1, 300}},
                {8, 2, 32, {17, 130, 129}},
                {6, 2, 16, {70, 5}}};
  for (const auto& s : shapes) {
    for (CacheDType t : {CacheDType::kF32, CacheDType::kBF16}) {
      const auto batch = static_cast<int64_t>(s.lengths.size());
      std::vector<Cache> k, v;
      std::vector<const void*> k_seqs, v_seqs;
      int64_t longest = 0;
      for (int64_t len : s.lengths) {
        const size_t n = (len + 3) * s.hkv * s.dh;  // a little spare capacity
        k.push_back(RandomCache(n, rng));
        v.push_back(RandomCache(n, rng));
        longest = std::max(longest, len);
      }
      for (int64_t b = 0; b < batch; ++b) {
        k_seqs.push_back(k[b].data(t));
        v_seqs.push_back(v[b].data(t));
      }
      const auto q = RandomNormals(batch * s.h * s.dh, rng);
      std::vector<float> out(q.size()), ref(q.size());
      MhaDecodeParams p =
          testing::MhaParamsOf(batch, s.h, s.hkv, s.dh, longest, longest, t);
      p.position_major = true;
      p.k_seqs = k_seqs.data();
      p.v_seqs = v_seqs.data();
      p.lengths = s.lengths.data();
      p.q = q.data();
      p.out = out.data();
      ASSERT_TRUE(MhaDecode(p).ok());
      p.out = ref.data();
      ASSERT_TRUE(MhaDecodeReference(p).ok());
      ExpectClose(out, ref, t,
                  "mha per-sequence caches G=" + std::to_string(s.h / s.hkv));
    }
  }
}

TEST_P(KernelTest, PerSequenceCachesNeedAllTheirParts) {
  std::vector<float> buf(64), q(8), out(8);
  const void* seqs[1] = {buf.data()};
  const int64_t lengths[1] = {4};
  MhaDecodeParams p = testing::MhaParamsOf(1, 1, 1, 8, 4, 4, CacheDType::kF32);
  p.q = q.data();
  p.out = out.data();
  p.position_major = true;
  p.k_seqs = p.v_seqs = seqs;
  EXPECT_EQ(MhaDecode(p).code(),
            absl::StatusCode::kInvalidArgument);  // no lengths
  p.lengths = lengths;
  EXPECT_TRUE(MhaDecode(p).ok());
  p.position_major = false;  // a head-major block's offsets need its capacity
  EXPECT_EQ(MhaDecode(p).code(), absl::StatusCode::kInvalidArgument);
  p.position_major = true;
  p.length = 3;  // shorter than a sequence's own length
  EXPECT_EQ(MhaDecode(p).code(), absl::StatusCode::kInvalidArgument);
}

// LRKV shapes both factored tests run: L = 1, L off the tile, chunked long
// contexts, r = 0, H_kv < H, b > 1, QK-norm scales.
struct FactoredShape {
  int64_t b, h, hkv, dh, r, length;
  bool sigma;
  // Keys at position t scaled by 1 + rise·t: scores that climb through the
  // context, so a running maximum keeps moving by more than a few units.
  float rise = 0;
};

// Scales row t of each sequence's `width`-wide rows (capacity `cap`) by
// 1 + rise·t, in both dtypes.
void RaiseRows(Cache& c, int64_t width, int64_t cap, float rise) {
  for (size_t i = 0; i < c.f32.size(); ++i) {
    const auto t = static_cast<int64_t>(i) / width % cap;
    c.f32[i] *= 1.0f + rise * static_cast<float>(t);
    c.bf16[i] = FloatToBFloat16(c.f32[i]);
  }
}
// The last four take the row kernel's one-pass shared-and-latent key dots,
// its 8-head softmax and its row-by-row latent values on AVX2 (heads in whole
// blocks of 8, 1-8 query heads per KV head, r >= 8): Qwen3-0.6B's shape at
// budget 0.5 (r = 47 ends in a partial vector) with QK-norm scales,
// Llama-3.2-1B's (r = 24, whole vectors) in chunks, one KV head, and r = 9.
constexpr FactoredShape kFactoredShapes[] = {
    {1, 4, 4, 64, 16, 1, false},      {2, 8, 4, 8, 2, 37, true},
    {1, 12, 12, 128, 51, 600, false}, {3, 6, 2, 32, 0, 100, true},
    {1, 4, 2, 16, 16, 1030, true},    {4, 12, 12, 128, 51, 17, false},
    {1, 16, 8, 128, 47, 601, true},   {2, 32, 8, 64, 24, 1030, false},
    {1, 8, 1, 32, 9, 77, true},       {3, 16, 16, 16, 8, 35, false}};

// Random QK-norm scales and queries for a shape, and the factored parameters
// that read them (segments and outputs are the caller's).
struct FactoredInputs {
  std::vector<float> sigma, q, ql;
  FactoredInputs(const FactoredShape& s, int64_t capacity, std::mt19937& rng)
      : sigma(RandomNormals(s.b * capacity * s.hkv, rng, 0.3f)),
        q(RandomNormals(s.b * s.h * s.dh, rng)),
        ql(RandomNormals(s.b * s.h * s.r, rng)) {}
  FactoredDecodeParams Params(const FactoredShape& s, CacheDType t,
                              int64_t capacity) const {
    FactoredDecodeParams p = testing::FactoredParamsOf(
        s.b, s.h, s.hkv, s.dh, s.r, s.length, capacity, t);
    p.sigma = s.sigma ? sigma.data() : nullptr;
    p.q = q.data();
    p.q_latent = ql.data();
    return p;
  }
};

TEST_P(KernelTest, FactoredLrkvAndMlaMatchTheReference) {
  std::mt19937 rng(2);
  for (const auto& s : kFactoredShapes) {
    for (CacheDType t : {CacheDType::kF32, CacheDType::kBF16}) {
      // One interleaved row per position, with padding, so offsets and strides
      // matter.
      const int64_t row = 2 * s.dh + 2 * s.hkv * s.r + 3;
      const int64_t capacity = s.length + 5;
      const Cache cache = RandomCache(s.b * capacity * row, rng);
      auto segment = [&](int64_t offset) {
        return CacheSegment{
            t == CacheDType::kF32
                ? static_cast<const void*>(cache.f32.data() + offset)
                : static_cast<const void*>(cache.bf16.data() + offset),
            row};
      };
      const FactoredInputs in(s, capacity, rng);
      FactoredDecodeParams p = in.Params(s, t, capacity);
      p.k = segment(1);
      p.v = segment(1 + s.dh);
      p.zk = segment(2 + 2 * s.dh);
      p.zv = segment(3 + 2 * s.dh + s.hkv * s.r);
      std::vector<float> out(s.b * s.h * s.dh), out_l(s.b * s.h * s.r);
      std::vector<float> ref(out.size()), ref_l(out_l.size());
      p.out = out.data();
      p.out_latent = out_l.data();
      ASSERT_TRUE(FactoredDecode(p).ok());
      p.out = ref.data();
      p.out_latent = ref_l.data();
      ASSERT_TRUE(FactoredDecodeReference(p).ok());
      const std::string what =
          "lrkv L=" + std::to_string(s.length) + " r=" + std::to_string(s.r);
      ExpectClose(out, ref, t, what);
      if (s.r > 0) ExpectClose(out_l, ref_l, t, what + " latent");
    }
  }
  // Absorbed MLA: one latent read as both key and value.
  for (CacheDType t : {CacheDType::kF32, CacheDType::kBF16}) {
    const int64_t dc = 96, length = 333, h = 8;
    const Cache cache = RandomCache(2 * length * dc, rng);
    const auto q = RandomNormals(2 * h * dc, rng);
    FactoredDecodeParams p =
        testing::FactoredParamsOf(2, h, 1, dc, 0, length, length, t);
    p.k = p.v = {cache.data(t), dc};
    p.q = q.data();
    p.scale = 0.1f;
    std::vector<float> out(2 * h * dc), ref(out.size());
    p.out = out.data();
    ASSERT_TRUE(FactoredDecode(p).ok());
    p.out = ref.data();
    ASSERT_TRUE(FactoredDecodeReference(p).ok());
    ExpectClose(out, ref, t, "mla");
  }
}

TEST_P(KernelTest, ReconstructModeMatchesTheReference) {
  std::mt19937 rng(3);
  for (CacheDType t : {CacheDType::kF32, CacheDType::kBF16}) {
    const int64_t b = 2, h = 8, hkv = 4, dh = 16, r = 5, length = 77;
    // Separate arrays per segment (the layout the engines use).
    const Cache k = RandomCache(b * length * dh, rng),
                v = RandomCache(b * length * dh, rng),
                zk = RandomCache(b * length * hkv * r, rng),
                zv = RandomCache(b * length * hkv * r, rng);
    const auto q = RandomNormals(b * h * dh, rng),
               bt = RandomNormals(hkv * r * dh, rng, 0.5f);
    std::vector<float> cos(length * dh / 2), sin(cos.size());
    for (int64_t i = 0; i < length; ++i) {
      for (int64_t c = 0; c < dh / 2; ++c) {
        const double a = i * std::pow(10000.0, -2.0 * c / dh);
        cos[i * dh / 2 + c] = std::cos(a);
        sin[i * dh / 2 + c] = std::sin(a);
      }
    }
    FactoredDecodeParams p =
        testing::FactoredParamsOf(b, h, hkv, dh, r, length, length, t);
    p.k = {k.data(t), dh};
    p.v = {v.data(t), dh};
    p.zk = {zk.data(t), hkv * r};
    p.zv = {zv.data(t), hkv * r};
    p.q = q.data();
    p.up_k_t = bt.data();
    p.rope_cos = cos.data();
    p.rope_sin = sin.data();  // scale 1/sqrt(16) = 0.25
    std::vector<float> out(b * h * dh), out_l(b * h * r), ref(out.size()),
        ref_l(out_l.size());
    p.out = out.data();
    p.out_latent = out_l.data();
    ASSERT_TRUE(FactoredDecode(p).ok());
    p.out = ref.data();
    p.out_latent = ref_l.data();
    ASSERT_TRUE(FactoredDecodeReference(p).ok());
    ExpectClose(out, ref, t, "reconstruct");
    ExpectClose(out_l, ref_l, t, "reconstruct latent");
  }
}

// The tiled layout: the same cache written as rows and tiled, read by the
// kernel (the fused tiled kernel on "best" where the CPU has AVX512-BF16, the
// copy-to-rows path otherwise) and by the reference on either layout.
// Positions past the length are NaN, so a kernel that lets them into a score or
// a weighted sum fails.
TEST_P(KernelTest, TiledCacheMatchesTheReference) {
  std::mt19937 rng(4);
  // Beyond the shared shapes: 16 heads (blocks of 12 and 4), one KV head
  // with an odd latent width, 6 heads of odd rank, r = d_h, and groups of 2
  // and 4 query heads per KV head (Qwen3-0.6B's and Llama-3.2-1B's, whose
  // latents each group loads once), and keys whose scores climb through a
  // chunk (the running maximum moves by more than a few units, many times).
  std::vector<FactoredShape> shapes(std::begin(kFactoredShapes),
                                    std::end(kFactoredShapes));
  shapes.insert(shapes.end(), {{2, 16, 16, 64, 64, 333, true},
                               {1, 3, 1, 16, 5, 250, false},
                               {2, 6, 6, 24, 7, 47, false},
                               {1, 2, 1, 128, 128, 2100, false},
                               {1, 16, 8, 128, 46, 300, true},
                               {2, 32, 8, 64, 24, 90, false},
                               {1, 8, 2, 32, 33, 70, true},
                               {1, 16, 8, 128, 46, 1500, true, 0.02f},
                               {2, 32, 8, 64, 24, 300, false, 0.05f}});
  for (const auto& s : shapes) {
    for (CacheDType t : {CacheDType::kF32, CacheDType::kBF16}) {
      const int64_t cap =
          (s.length + kCacheTile - 1) / kCacheTile * kCacheTile + kCacheTile;
      const int64_t lat = s.hkv * s.r, positions = s.b * cap;
      Cache k = RandomCache(positions * s.dh, rng),
            v = RandomCache(positions * s.dh, rng),
            zk = RandomCache(positions * lat, rng),
            zv = RandomCache(positions * lat, rng);
      if (s.rise != 0) {
        RaiseRows(k, s.dh, cap, s.rise);
        RaiseRows(zk, lat, cap, s.rise);
      }
      const FactoredInputs in(s, cap, rng);
      const int64_t es = CacheDTypeSize(t), lane = ElementsPerLane(t);
      // Tiled copies, NaN past the length.
      std::vector<std::vector<char>> tiled;
      auto tile = [&](const Cache& rows, bool key, int64_t width) {
        const int64_t stride = TiledStride(t, key, width);
        tiled.emplace_back(std::max<int64_t>(positions * stride, 1) * es);
        char* data = tiled.back().data();
        RowsToTiles(t, key, positions, width, width, stride, rows.data(t),
                    data);
        for (int64_t b = 0; b < s.b; ++b) {
          for (int64_t pos = s.length; pos < cap; ++pos) {
            for (int64_t c = 0; c < stride; ++c) {
              const int64_t at = SegmentOffset(CacheLayout::kTiles, key, lane,
                                               stride, cap, b, pos, c);
              if (t == CacheDType::kF32) {
                reinterpret_cast<float*>(data)[at] = NAN;
              } else {
                reinterpret_cast<uint16_t*>(data)[at] = 0x7fc0;
              }
            }
          }
        }
        return CacheSegment{data, stride};
      };
      FactoredDecodeParams p = in.Params(s, t, cap);
      p.k = {k.data(t), s.dh};
      p.v = {v.data(t), s.dh};
      p.zk = {zk.data(t), lat};
      p.zv = {zv.data(t), lat};
      std::vector<float> ref(s.b * s.h * s.dh), ref_l(s.b * s.h * s.r);
      p.out = ref.data();
      p.out_latent = ref_l.data();
      ASSERT_TRUE(FactoredDecodeReference(p).ok());  // rows
      p.layout = CacheLayout::kTiles;
      p.k = tile(k, true, s.dh);
      p.v = tile(v, false, s.dh);
      p.zk = tile(zk, true, lat);
      p.zv = tile(zv, false, lat);
      std::vector<float> out(ref.size()), out_l(ref_l.size());
      std::vector<float> ref2(ref.size()), ref2_l(ref_l.size());
      p.out = ref2.data();
      p.out_latent = ref2_l.data();
      ASSERT_TRUE(FactoredDecodeReference(p).ok());  // tiles
      p.out = out.data();
      p.out_latent = out_l.data();
      if (t == CacheDType::kBF16 && s.rise == 0) {
        // Queries and weights rounded to bf16 (FlashAttention's choice):
        // still within the bf16 tolerance of the exact reference. Not with
        // climbing scores: a rounded query errs by ~2^-9·|q||k| in each score,
        // which scores of tens turn into weight errors past that tolerance
        // (cosine 1.1e-5 and 2.2e-5 on the rising shapes).
        p.bf16_operands = true;
        ASSERT_TRUE(FactoredDecode(p).ok());
        const std::string rounded =
            "tiled bf16 q,p L=" + std::to_string(s.length) +
            " H=" + std::to_string(s.h) + " r=" + std::to_string(s.r);
        ExpectClose(out, ref, t, rounded);
        if (s.r > 0) ExpectClose(out_l, ref_l, t, rounded + " latent");
        p.bf16_operands = false;
      }
      ASSERT_TRUE(FactoredDecode(p).ok());
      const std::string what = "tiled L=" + std::to_string(s.length) +
                               " H=" + std::to_string(s.h) +
                               " r=" + std::to_string(s.r) +
                               (t == CacheDType::kF32 ? " fp32" : " bf16");
      EXPECT_EQ(ref, ref2) << what
                           << ": the reference reads both layouts alike";
      ExpectClose(out, ref, t, what);
      if (s.r > 0) ExpectClose(out_l, ref_l, t, what + " latent");
    }
  }
}

TEST_P(KernelTest, TiledCacheIsValidated) {
  std::vector<uint16_t> buf(64 * 64);
  std::vector<float> q(64), out(64);
  FactoredDecodeParams p;
  p.heads = p.kv_heads = 1;
  p.dim = 8;
  p.length = 10;
  p.capacity = 20;  // not a whole number of tiles
  p.dtype = CacheDType::kBF16;
  p.layout = CacheLayout::kTiles;
  p.k = {buf.data(), 8};
  p.v = {buf.data() + 512, 8};
  p.q = q.data();
  p.out = out.data();
  EXPECT_EQ(FactoredDecode(p).code(), absl::StatusCode::kInvalidArgument);
  p.capacity = 32;
  EXPECT_TRUE(FactoredDecode(p).ok());
  p.k.stride = 9;  // bf16 keys pack dim pairs
  p.v.stride = 9;
  EXPECT_EQ(FactoredDecode(p).code(), absl::StatusCode::kInvalidArgument);
  p.k = p.v = {buf.data(), 8};  // one segment as key and value
  EXPECT_EQ(FactoredDecode(p).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(KernelTest, BadShapesAreRejected) {
  MhaDecodeParams p;
  p.heads = 6;
  p.kv_heads = 4;
  p.head_dim = 8;
  EXPECT_EQ(MhaDecode(p).code(), absl::StatusCode::kInvalidArgument);
  FactoredDecodeParams f;
  f.dim = 8;
  f.length = 10;
  f.capacity = 5;
  EXPECT_EQ(FactoredDecode(f).code(), absl::StatusCode::kInvalidArgument);
}

LRKV_INSTANTIATE_ISA_TESTS(KernelTest);

}  // namespace
}  // namespace lrkv::kernels
