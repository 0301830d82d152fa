// The decode kernels over Q8_0 / Q4_0 caches (kernels/decode_quantized_impl.h)
// against their naive float64 references (which dequantize each element through
// base/block_quant.h), for every ISA build this CPU runs; and the quantizers
// against ggml's definition. Both sides read the same quantized blocks, and a
// dequantized value (an fp16 scale times a small integer) is exact in fp32, so
// the tolerance is fp32's: max|Δ|/max|ref| <= 1e-5.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/block_quant.h"
#include "gtest/gtest.h"
#include "kernels/decode_attention.h"
#include "tests/kernels/isa_test.h"
#include "tests/kernels/kernel_test_util.h"

namespace lrkv::kernels {
namespace {

using testing::RandomNormals;

DType BlockDType(CacheDType t) {
  return t == CacheDType::kQ8_0 ? DType::kQ8_0 : DType::kQ4_0;
}

// n random values (n a multiple of 32) quantized to t's blocks.
std::vector<uint8_t> QuantizedCache(size_t n, CacheDType t, std::mt19937& rng) {
  const auto values = RandomNormals(n, rng);
  std::vector<uint8_t> blocks(CacheBytes(t, static_cast<int64_t>(n)));
  QuantizeBlocks(BlockDType(t), values.data(), n, blocks.data());
  return blocks;
}

TEST(BlockQuantTest, QuantizersFollowGgml) {
  // Q8_0: d = max|x| / 127, q = round(x / d); the largest value is exact.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = 0.37f * static_cast<float>(i - 12);
  std::vector<uint8_t> q8(kQ8_0BlockBytes), q4(kQ4_0BlockBytes);
  std::vector<float> y8(32), y4(32);
  QuantizeBlocks(DType::kQ8_0, x.data(), 32, q8.data());
  DequantizeBlocks(DType::kQ8_0, q8.data(), 32, y8.data());
  const float d8 = 0.37f * 19 / 127;
  EXPECT_EQ(static_cast<int8_t>(q8[2 + 31]), 127);
  EXPECT_EQ(static_cast<int8_t>(q8[2 + 12]), 0);
  // Q4_0: d = (the value of largest magnitude) / -8, so that value is
  // stored as 0 (x / d + 8.5 truncated) and read back exactly; the low
  // nibbles hold values 0-15, the high ones 16-31.
  QuantizeBlocks(DType::kQ4_0, x.data(), 32, q4.data());
  DequantizeBlocks(DType::kQ4_0, q4.data(), 32, y4.data());
  EXPECT_EQ(q4[2 + 15] >> 4, 0);  // value 31, the largest magnitude
  const float d4 = 0.37f * 19 / 8;
  for (int i = 0; i < 32; ++i) {
    EXPECT_LE(std::fabs(y8[i] - x[i]), d8 / 2 * 1.01f) << i;
    EXPECT_LE(std::fabs(y4[i] - x[i]), d4 / 2 * 1.01f) << i;
  }
  EXPECT_NEAR(y4[31], x[31], 1e-3f * x[31]);
  // Zeros stay zeros (d = 0, no division by it).
  std::vector<float> zeros(32, 0.0f);
  QuantizeBlocks(DType::kQ4_0, zeros.data(), 32, q4.data());
  DequantizeBlocks(DType::kQ4_0, q4.data(), 32, y4.data());
  for (float v : y4) EXPECT_EQ(v, 0.0f);
}

class QuantizedKernelTest : public testing::IsaTest {};

TEST_P(QuantizedKernelTest, MhaMatchesTheReference) {
  std::mt19937 rng(11);
  struct Shape {
    int64_t b, h, hkv, dh, length, capacity;
  } shapes[] = {{1, 4, 4, 64, 1, 1},        {2, 8, 2, 32, 37, 40},
                {3, 12, 12, 128, 300, 300}, {1, 16, 8, 128, 1025, 1030},
                {2, 32, 8, 64, 130, 140},   {1, 6, 1, 96, 17, 17},
                {1, 4, 1, 64, 41, 64}};
  for (const auto& s : shapes) {
    for (CacheDType t : {CacheDType::kQ8_0, CacheDType::kQ4_0}) {
      const size_t kv = s.b * s.hkv * s.capacity * s.dh;
      const auto k = QuantizedCache(kv, t, rng), v = QuantizedCache(kv, t, rng);
      const auto q = RandomNormals(s.b * s.h * s.dh, rng);
      std::vector<float> out(s.b * s.h * s.dh), ref(out.size());
      for (bool position_major : {false, true}) {
        MhaDecodeParams p = testing::MhaParamsOf(s.b, s.h, s.hkv, s.dh,
                                                 s.length, s.capacity, t);
        p.position_major = position_major;
        p.k = k.data();
        p.v = v.data();
        p.q = q.data();
        p.out = out.data();
        ASSERT_TRUE(MhaDecode(p).ok());
        p.out = ref.data();
        ASSERT_TRUE(MhaDecodeReference(p).ok());
        testing::ExpectClose(out, ref, false,
                             "mha L=" + std::to_string(s.length) +
                                 (position_major ? " position-major" : ""));
      }
    }
  }
}

TEST_P(QuantizedKernelTest, MhaReadsEachSequencesOwnCache) {
  std::mt19937 rng(12);
  const int64_t h = 8, hkv = 4, dh = 64;
  const std::vector<int64_t> lengths = {300, 1, 77};
  for (CacheDType t : {CacheDType::kQ8_0, CacheDType::kQ4_0}) {
    std::vector<std::vector<uint8_t>> ks, vs;
    std::vector<const void*> kp, vp;
    for (int64_t n : lengths) {
      ks.push_back(QuantizedCache(n * hkv * dh, t, rng));
      vs.push_back(QuantizedCache(n * hkv * dh, t, rng));
      kp.push_back(ks.back().data());
      vp.push_back(vs.back().data());
    }
    const int64_t b = static_cast<int64_t>(lengths.size());
    const auto q = RandomNormals(b * h * dh, rng);
    std::vector<float> out(b * h * dh), ref(out.size());
    MhaDecodeParams p = testing::MhaParamsOf(b, h, hkv, dh, 300, 300, t);
    p.position_major = true;
    p.k_seqs = kp.data();
    p.v_seqs = vp.data();
    p.lengths = lengths.data();
    p.q = q.data();
    p.out = out.data();
    ASSERT_TRUE(MhaDecode(p).ok());
    p.out = ref.data();
    ASSERT_TRUE(MhaDecodeReference(p).ok());
    testing::ExpectClose(out, ref, false, "mha per-sequence caches");
  }
}

TEST_P(QuantizedKernelTest, FactoredLrkvAndMlaMatchTheReference) {
  std::mt19937 rng(13);
  struct Shape {
    int64_t b, h, hkv, dim, r, length;
    bool sigma;
  } shapes[] = {
      {1, 4, 4, 64, 8, 1, false},       {2, 8, 4, 32, 16, 37, true},
      {1, 12, 12, 128, 24, 600, false}, {3, 6, 2, 32, 0, 100, true},
      {1, 16, 8, 128, 44, 1030, true},  {2, 8, 1, 64, 32, 300, false}};
  for (const auto& s : shapes) {
    for (CacheDType t : {CacheDType::kQ8_0, CacheDType::kQ4_0}) {
      const int64_t capacity = s.length + 3, lw = s.hkv * s.r;
      const auto k = QuantizedCache(s.b * capacity * s.dim, t, rng);
      const auto v = QuantizedCache(s.b * capacity * s.dim, t, rng);
      const auto zk = QuantizedCache(s.b * capacity * lw, t, rng);
      const auto zv = QuantizedCache(s.b * capacity * lw, t, rng);
      const auto sigma = RandomNormals(s.b * capacity * s.hkv, rng, 0.3f);
      const auto q = RandomNormals(s.b * s.h * s.dim, rng);
      const auto ql = RandomNormals(s.b * s.h * s.r, rng);
      FactoredDecodeParams p = testing::FactoredParamsOf(
          s.b, s.h, s.hkv, s.dim, s.r, s.length, capacity, t);
      p.k = {k.data(), s.dim};
      p.v = {v.data(), s.dim};
      p.zk = {zk.data(), lw};
      p.zv = {zv.data(), lw};
      p.sigma = s.sigma ? sigma.data() : nullptr;
      p.q = q.data();
      p.q_latent = ql.data();
      std::vector<float> out(s.b * s.h * s.dim), out_l(s.b * s.h * s.r);
      std::vector<float> ref(out.size()), ref_l(out_l.size());
      p.out = out.data();
      p.out_latent = out_l.data();
      ASSERT_TRUE(FactoredDecode(p).ok());
      p.out = ref.data();
      p.out_latent = ref_l.data();
      ASSERT_TRUE(FactoredDecodeReference(p).ok());
      const std::string what =
          "lrkv L=" + std::to_string(s.length) + " r=" + std::to_string(s.r);
      testing::ExpectClose(out, ref, false, what);
      if (s.r > 0) testing::ExpectClose(out_l, ref_l, false, what + " latent");
    }
  }
  // Absorbed MLA: one latent read as key and value, plus a rotated key.
  for (CacheDType t : {CacheDType::kQ8_0, CacheDType::kQ4_0}) {
    const int64_t dc = 96, w = 32, length = 333, h = 8;
    const auto c = QuantizedCache(2 * length * dc, t, rng);
    const auto kr = QuantizedCache(2 * length * w, t, rng);
    const auto q = RandomNormals(2 * h * dc, rng),
               qr = RandomNormals(2 * h * w, rng);
    FactoredDecodeParams p =
        testing::FactoredParamsOf(2, h, 1, dc, w, length, length, t);
    p.k = p.v = {c.data(), dc};
    p.zk = p.zv = {kr.data(), w};
    p.q = q.data();
    p.q_latent = qr.data();
    p.scale = 0.1f;
    std::vector<float> out(2 * h * dc), ref(out.size()), lat(2 * h * w);
    p.out = out.data();
    p.out_latent = lat.data();
    ASSERT_TRUE(FactoredDecode(p).ok());
    p.out = ref.data();
    ASSERT_TRUE(FactoredDecodeReference(p).ok());
    testing::ExpectClose(out, ref, false, "mla");
  }
}

// A row that does not hold whole blocks is refused, naming the width.
TEST_P(QuantizedKernelTest, WidthsThatAreNotWholeBlocksAreRefused) {
  std::vector<uint8_t> cache(4096);
  std::vector<float> q(64), out(64);
  MhaDecodeParams p = testing::MhaParamsOf(1, 2, 2, 8, 4, 4, CacheDType::kQ8_0);
  p.k = p.v = cache.data();
  p.q = q.data();
  p.out = out.data();
  const absl::Status st = MhaDecode(p);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("head dim of 8"), std::string::npos) << st;
  FactoredDecodeParams f =
      testing::FactoredParamsOf(1, 4, 4, 32, 6, 4, 4, CacheDType::kQ4_0);
  f.k = f.v = {cache.data(), 32};
  f.zk = f.zv = {cache.data(), 24};
  f.q = f.q_latent = q.data();
  f.out = f.out_latent = out.data();
  const absl::Status fs = FactoredDecode(f);
  EXPECT_EQ(fs.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fs.message().find("latent width of 24"), std::string::npos) << fs;
  f.zk = f.zv = {cache.data(), 32};
  f.rank = 8;
  f.layout = CacheLayout::kTiles;
  EXPECT_EQ(FactoredDecode(f).code(), absl::StatusCode::kInvalidArgument);
}

LRKV_INSTANTIATE_ISA_TESTS(QuantizedKernelTest);

}  // namespace
}  // namespace lrkv::kernels
