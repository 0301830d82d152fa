// The CUDA decode kernels against the CPU references, with the CPU kernel tests'
// tolerances (fp32: max|Δ|/max|ref| <= 1e-5 is loosened by nothing; bf16: cosine
// distance <= 1e-5). Every test is named *_CUDA and skips without a GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/decode_attention_cuda.h"
#include "kernels/decode_attention.h"
#include "model/dtype.h"
#include "tests/kernel_test_util.h"

namespace lrkv::kernels {
namespace {

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(const std::vector<T>& host) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(1, host.size()) * sizeof(T)), cudaSuccess);
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<T> Download(size_t n) const {
    std::vector<T> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

std::vector<float> RandomFloats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBFloat16(v[i]);
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref, bool bf16) {
  testing::ExpectClose(got, ref, bf16, bf16 ? "bf16" : "fp32");
}

TEST(DecodeKernels, MhaMatchesTheCpuReference_CUDA) {
  if (!cuda::DeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(7);
  struct Shape {
    int64_t b, h, hkv, dh, length;
  } shapes[] = {{1, 4, 4, 64, 1}, {2, 8, 2, 128, 333}, {4, 12, 12, 128, 4096}};
  for (const auto& s : shapes) {
    for (bool bf16 : {false, true}) {
      const size_t kv = s.b * s.hkv * s.length * s.dh;
      auto k = RandomFloats(kv, rng), v = RandomFloats(kv, rng);
      auto q = RandomFloats(s.b * s.h * s.dh, rng);
      std::vector<float> ref(s.b * s.h * s.dh);
      MhaDecodeParams p;
      p.batch = s.b;
      p.heads = s.h;
      p.kv_heads = s.hkv;
      p.head_dim = s.dh;
      p.length = p.capacity = s.length;
      p.dtype = bf16 ? CacheDType::kBF16 : CacheDType::kF32;
      p.scale = 1.0f / std::sqrt(static_cast<float>(s.dh));
      const auto kb = ToBf16(k), vb = ToBf16(v);
      p.k = bf16 ? static_cast<const void*>(kb.data()) : k.data();
      p.v = bf16 ? static_cast<const void*>(vb.data()) : v.data();
      p.q = q.data();
      p.out = ref.data();
      ASSERT_TRUE(MhaDecodeReference(p).ok());
      DeviceBuffer<float> dk(k), dv(v), dq(q), dout(std::vector<float>(ref.size()));
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
  } shapes[] = {{1, 4, 4, 64, 16, 1}, {2, 8, 4, 8, 2, 77}, {4, 12, 12, 128, 51, 2048},
                {1, 6, 2, 32, 0, 500}};
  for (const auto& s : shapes) {
    for (bool bf16 : {false, true}) {
      const int64_t lat = s.hkv * s.r;
      auto ks = RandomFloats(s.b * s.length * s.dh, rng), vs = RandomFloats(ks.size(), rng);
      auto zk = RandomFloats(s.b * s.length * lat, rng), zv = RandomFloats(zk.size(), rng);
      auto sigma = RandomFloats(s.b * s.length * s.hkv, rng);
      auto q = RandomFloats(s.b * s.h * s.dh, rng), ql = RandomFloats(s.b * s.h * s.r, rng);
      std::vector<float> ref(s.b * s.h * s.dh), ref_l(s.b * s.h * s.r);
      FactoredDecodeParams p;
      p.batch = s.b;
      p.heads = s.h;
      p.kv_heads = s.hkv;
      p.dim = s.dh;
      p.rank = s.r;
      p.length = p.capacity = s.length;
      p.dtype = bf16 ? CacheDType::kBF16 : CacheDType::kF32;
      p.scale = 1.0f / std::sqrt(static_cast<float>(s.dh));
      const auto ksb = ToBf16(ks), vsb = ToBf16(vs), zkb = ToBf16(zk), zvb = ToBf16(zv);
      auto host = [&](const std::vector<float>& f, const std::vector<uint16_t>& h) {
        return bf16 ? static_cast<const void*>(h.data()) : static_cast<const void*>(f.data());
      };
      p.k = {host(ks, ksb), s.dh};
      p.v = {host(vs, vsb), s.dh};
      p.zk = {host(zk, zkb), lat};
      p.zv = {host(zv, zvb), lat};
      p.sigma = sigma.data();
      p.q = q.data();
      p.q_latent = ql.data();
      p.out = ref.data();
      p.out_latent = ref_l.data();
      ASSERT_TRUE(FactoredDecodeReference(p).ok());
      DeviceBuffer<float> dks(ks), dvs(vs), dzk(zk), dzv(zv), dsig(sigma), dq(q), dql(ql),
          dout(std::vector<float>(ref.size())), doutl(std::vector<float>(ref_l.size()));
      DeviceBuffer<uint16_t> dksb(ksb), dvsb(vsb), dzkb(zkb), dzvb(zvb);
      auto dev = [&](const DeviceBuffer<float>& f, const DeviceBuffer<uint16_t>& h) {
        return bf16 ? static_cast<const void*>(h.ptr) : static_cast<const void*>(f.ptr);
      };
      p.k = {dev(dks, dksb), s.dh};
      p.v = {dev(dvs, dvsb), s.dh};
      p.zk = {dev(dzk, dzkb), lat};
      p.zv = {dev(dzv, dzvb), lat};
      p.sigma = dsig.ptr;
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

}  // namespace
}  // namespace lrkv::kernels
