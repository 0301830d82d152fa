// The CUDA decode kernels against the CPU references, with the CPU kernel
// tests' tolerances (fp32: max|Δ|/max|ref| <= 1e-5; bf16: cosine distance <=
// 1e-5), and the CUDA decode bench. Tests that need a GPU are named *_CUDA and
// skip without one; the argument checks run everywhere.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/decode_attention_cuda.h"
#include "kernels/cuda/decode_bench_cuda.h"
#include "kernels/decode_attention.h"
#include "base/dtype.h"
#include "tests/kernels/kernel_test_util.h"

namespace lrkv::kernels {
namespace {

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(const std::vector<T>& host) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(1, host.size()) * sizeof(T)),
              cudaSuccess);
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<T> Download(size_t n) const {
    std::vector<T> out(n);
    EXPECT_EQ(
        cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost),
        cudaSuccess);
    return out;
  }
};

using testing::RandomNormals;

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBFloat16(v[i]);
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref,
                 bool bf16) {
  testing::ExpectClose(got, ref, bf16, bf16 ? "bf16" : "fp32");
}

TEST(DecodeKernels, MhaMatchesTheCpuReference_CUDA) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(7);
  struct Shape {
    int64_t b, h, hkv, dh, length;
  } shapes[] = {{1, 4, 4, 64, 1},       {2, 8, 2, 128, 333},
                {4, 12, 12, 128, 4096}, {3, 16, 2, 64, 1000},
                {1, 2, 1, 8, 31},       {2, 12, 4, 128, 5000},
                {1, 8, 8, 256, 777}};
  for (const auto& s : shapes) {
    // fp32 and bf16, each head-major and position-major: up to 4 query heads
    // per KV head run the streaming kernel, more the tensor-core (bf16) or
    // CUDA-core (fp32) split kernel.
    for (int variant = 0; variant < 4; ++variant) {
      const bool bf16 = variant % 2 == 1, position_major = variant >= 2;
      SCOPED_TRACE(::testing::Message() << "L=" << s.length << " h=" << s.h
                                        << " variant " << variant);
      const size_t kv = s.b * s.hkv * s.length * s.dh;
      auto k = RandomNormals(kv, rng), v = RandomNormals(kv, rng);
      auto q = RandomNormals(s.b * s.h * s.dh, rng);
      std::vector<float> ref(s.b * s.h * s.dh);
      MhaDecodeParams p =
          testing::MhaParamsOf(s.b, s.h, s.hkv, s.dh, s.length, s.length,
                               bf16 ? CacheDType::kBF16 : CacheDType::kF32);
      p.position_major = position_major;
      const auto kb = ToBf16(k), vb = ToBf16(v);
      p.k = bf16 ? static_cast<const void*>(kb.data()) : k.data();
      p.v = bf16 ? static_cast<const void*>(vb.data()) : v.data();
      p.q = q.data();
      p.out = ref.data();
      ASSERT_TRUE(MhaDecodeReference(p).ok());
      DeviceBuffer<float> dk(k), dv(v), dq(q),
          dout(std::vector<float>(ref.size()));
      DeviceBuffer<uint16_t> dkb(kb), dvb(vb);
      p.k = bf16 ? static_cast<const void*>(dkb.ptr) : dk.ptr;
      p.v = bf16 ? static_cast<const void*>(dvb.ptr) : dv.ptr;
      p.q = dq.ptr;
      p.out = dout.ptr;
      ASSERT_TRUE(cuda::MhaDecodeCuda(p).ok());
      ExpectClose(dout.Download(ref.size()), ref, bf16);
    }
  }
}

TEST(DecodeKernels, FactoredLrkvMatchesTheCpuReference_CUDA) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(8);
  struct Shape {
    int64_t b, h, hkv, dh, r, length;
  } shapes[] = {{1, 4, 4, 64, 16, 1},       {2, 8, 4, 8, 2, 77},
                {4, 12, 12, 128, 51, 2048}, {1, 6, 2, 32, 0, 500},
                {2, 12, 12, 128, 51, 3001}, {1, 8, 2, 64, 64, 257},
                {2, 4, 1, 16, 5, 100},      {1, 32, 8, 128, 32, 300},
                {3, 9, 3, 128, 40, 1100}};
  for (const auto& s : shapes) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool bf16 = variant % 2 == 1, with_sigma = variant >= 2;
      SCOPED_TRACE(::testing::Message()
                   << "L=" << s.length << " h=" << s.h << " r=" << s.r
                   << " variant " << variant);
      const int64_t lat = s.hkv * s.r;
      auto ks = RandomNormals(s.b * s.length * s.dh, rng),
           vs = RandomNormals(ks.size(), rng);
      auto zk = RandomNormals(s.b * s.length * lat, rng),
           zv = RandomNormals(zk.size(), rng);
      auto sigma = RandomNormals(s.b * s.length * s.hkv, rng);
      auto q = RandomNormals(s.b * s.h * s.dh, rng),
           ql = RandomNormals(s.b * s.h * s.r, rng);
      std::vector<float> ref(s.b * s.h * s.dh), ref_l(s.b * s.h * s.r);
      FactoredDecodeParams p = testing::FactoredParamsOf(
          s.b, s.h, s.hkv, s.dh, s.r, s.length, s.length,
          bf16 ? CacheDType::kBF16 : CacheDType::kF32);
      const auto ksb = ToBf16(ks), vsb = ToBf16(vs), zkb = ToBf16(zk),
                 zvb = ToBf16(zv);
      auto host = [&](const std::vector<float>& f,
                      const std::vector<uint16_t>& h) {
        return bf16 ? static_cast<const void*>(h.data())
                    : static_cast<const void*>(f.data());
      };
      p.k = {host(ks, ksb), s.dh};
      p.v = {host(vs, vsb), s.dh};
      p.zk = {host(zk, zkb), lat};
      p.zv = {host(zv, zvb), lat};
      p.sigma = with_sigma ? sigma.data() : nullptr;
      p.q = q.data();
      p.q_latent = ql.data();
      p.out = ref.data();
      p.out_latent = ref_l.data();
      ASSERT_TRUE(FactoredDecodeReference(p).ok());
      DeviceBuffer<float> dks(ks), dvs(vs), dzk(zk), dzv(zv), dsig(sigma),
          dq(q), dql(ql), dout(std::vector<float>(ref.size())),
          doutl(std::vector<float>(ref_l.size()));
      DeviceBuffer<uint16_t> dksb(ksb), dvsb(vsb), dzkb(zkb), dzvb(zvb);
      auto dev = [&](const DeviceBuffer<float>& f,
                     const DeviceBuffer<uint16_t>& h) {
        return bf16 ? static_cast<const void*>(h.ptr)
                    : static_cast<const void*>(f.ptr);
      };
      p.k = {dev(dks, dksb), s.dh};
      p.v = {dev(dvs, dvsb), s.dh};
      p.zk = {dev(dzk, dzkb), lat};
      p.zv = {dev(dzv, dzvb), lat};
      p.sigma = with_sigma ? dsig.ptr : nullptr;
      p.q = dq.ptr;
      p.q_latent = dql.ptr;
      p.out = dout.ptr;
      p.out_latent = doutl.ptr;
      ASSERT_TRUE(cuda::FactoredDecodeCuda(p).ok());
      ExpectClose(dout.Download(ref.size()), ref, bf16);
      if (s.r > 0) ExpectClose(doutl.Download(ref_l.size()), ref_l, bf16);
    }
  }
}

// Absorbed MLA: one latent segment read as key and value, wider than a block's
// register budget would allow (d_c = 2·(d_h + H_kv·r) of the paper shape).
TEST(DecodeKernels, AbsorbedMlaMatchesTheCpuReference_CUDA) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(9);
  struct Shape {
    int64_t b, h, dc, length;
  } shapes[] = {{2, 12, 1480, 700}, {1, 4, 64, 33}, {1, 32, 96, 200}};
  for (const auto& s : shapes) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "d_c=" << s.dc << " h=" << s.h << " bf16 " << bf16);
      auto c = RandomNormals(s.b * s.length * s.dc, rng);
      auto q = RandomNormals(s.b * s.h * s.dc, rng);
      const auto cb = ToBf16(c);
      std::vector<float> ref(s.b * s.h * s.dc);
      FactoredDecodeParams p;
      p.batch = s.b;
      p.heads = s.h;
      p.dim = s.dc;
      p.length = p.capacity = s.length;
      p.dtype = bf16 ? CacheDType::kBF16 : CacheDType::kF32;
      p.scale = 1.0f / std::sqrt(128.0f);
      p.k = p.v = {bf16 ? static_cast<const void*>(cb.data()) : c.data(), s.dc};
      p.q = q.data();
      p.out = ref.data();
      ASSERT_TRUE(FactoredDecodeReference(p).ok());
      DeviceBuffer<float> dc(c), dq(q), dout(std::vector<float>(ref.size()));
      DeviceBuffer<uint16_t> dcb(cb);
      p.k = p.v = {bf16 ? static_cast<const void*>(dcb.ptr) : dc.ptr, s.dc};
      p.q = dq.ptr;
      p.out = dout.ptr;
      ASSERT_TRUE(cuda::FactoredDecodeCuda(p).ok());
      ExpectClose(dout.Download(ref.size()), ref, bf16);
    }
  }
}

// A caller-owned workspace makes the call asynchronous and is reused across
// shapes (grown, not reallocated per call).
TEST(DecodeKernels, WorkspaceIsReusedAcrossCalls_CUDA) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(10);
  cuda::DecodeWorkspace workspace;
  for (int64_t length : {5000, 17, 900}) {
    const int64_t b = 2, h = 8, hkv = 4, dh = 64;
    auto k = RandomNormals(b * hkv * length * dh, rng),
         v = RandomNormals(k.size(), rng);
    auto q = RandomNormals(b * h * dh, rng);
    std::vector<float> ref(b * h * dh);
    MhaDecodeParams p =
        testing::MhaParamsOf(b, h, hkv, dh, length, length, CacheDType::kF32);
    p.k = k.data();
    p.v = v.data();
    p.q = q.data();
    p.out = ref.data();
    ASSERT_TRUE(MhaDecodeReference(p).ok());
    DeviceBuffer<float> dk(k), dv(v), dq(q),
        dout(std::vector<float>(ref.size()));
    p.k = dk.ptr;
    p.v = dv.ptr;
    p.q = dq.ptr;
    p.out = dout.ptr;
    ASSERT_TRUE(cuda::MhaDecodeCuda(p, &workspace).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ExpectClose(dout.Download(ref.size()), ref, false);
  }
}

// Runs without a GPU: the checks come before any device call.
TEST(DecodeKernels, CudaRejectsTiledCachesAndReconstructMode) {
  std::vector<uint16_t> seg(16 * 64);
  std::vector<float> q(4 * 64), out(4 * 64), out_l(4 * 8), up(8 * 64);
  FactoredDecodeParams p;
  p.heads = 4;
  p.dim = 64;
  p.rank = 8;
  p.length = 10;
  p.capacity = 16;
  p.dtype = CacheDType::kBF16;
  p.layout = CacheLayout::kTiles;
  p.k = {seg.data(), 64};
  p.v = {seg.data() + 1, 64};
  p.zk = {seg.data(), 8};
  p.zv = {seg.data() + 2, 8};
  p.q = q.data();
  p.q_latent = q.data();
  p.out = out.data();
  p.out_latent = out_l.data();
  const absl::Status tiled = cuda::FactoredDecodeCuda(p);
  EXPECT_EQ(tiled.code(), absl::StatusCode::kInvalidArgument) << tiled;
  EXPECT_NE(tiled.message().find("row layout"), std::string::npos) << tiled;
  p.layout = CacheLayout::kRows;
  p.up_k_t = up.data();
  p.rope_cos = p.rope_sin = up.data();
  const absl::Status reconstruct = cuda::FactoredDecodeCuda(p);
  EXPECT_EQ(reconstruct.code(), absl::StatusCode::kInvalidArgument)
      << reconstruct;
  EXPECT_NE(reconstruct.message().find("CPU-only"), std::string::npos)
      << reconstruct;
}

TEST(DecodeBenchCuda, WithoutADeviceItSaysSo) {
  if (cuda::DeviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
  DecodeBenchOptions o;
  o.contexts = {64};
  const auto report = cuda::RunDecodeBenchCuda(o);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(DecodeBenchCuda, TimesEveryVariantBesideTheStreamRow_CUDA) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  DecodeBenchOptions o;
  o.contexts = {300, 2048};
  o.iterations = 3;
  const auto report = cuda::RunDecodeBenchCuda(o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NE(report->device, "cpu");
  std::vector<std::string> names;
  for (const auto& r : report->rows) {
    if (r.context == 300) names.push_back(r.variant);
    EXPECT_GT(r.median_ms, 0) << r.variant;
    EXPECT_LE(r.min_ms, r.median_ms) << r.variant;
    EXPECT_GT(r.bytes_per_step, 0) << r.variant;
    // Host time per enqueued step, for the decode steps only.
    if (r.variant == "stream") {
      EXPECT_EQ(r.host_us, 0);
    } else {
      EXPECT_GT(r.host_us, 0) << r.variant;
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"mha", "gqa", "mla", "lrkv-norope",
                                             "lrkv-plane", "stream"}));
  EXPECT_GT(report->stream_gbps, 0);
}

}  // namespace
}  // namespace lrkv::kernels
