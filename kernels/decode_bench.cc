// The decode benchmark (see decode_bench.h).
#include "kernels/decode_bench.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cache_layout.h"
#include "kernels/decode_attention.h"
#include "nlohmann/json.hpp"

namespace lrkv::kernels {
namespace {

using Clock = std::chrono::steady_clock;

struct Free {
  void operator()(void* p) const { std::free(p); }
};
using Memory = std::unique_ptr<void, Free>;

// Cache memory aligned to a page (LibTorch's CPU allocator aligns to 64
// bytes; malloc's large blocks start 16 bytes into a page, which would split
// every 64-byte vector load across two cache lines). Every variant and the
// streaming reference use it alike. Buffers of 2 MiB or more are aligned to
// 2 MiB and advised into transparent huge pages before they are touched
// (where the kernel allows them: "madvise" or "always"), as a serving
// process would allocate a KV cache: with 4 KiB pages a step over four
// segments crosses a page every few KB per segment.
Memory AlignedMemory(size_t bytes) {
  const size_t huge = size_t{2} << 20;
  const size_t align = bytes >= huge ? huge : 4096;
  bytes = std::max<size_t>((bytes + align - 1) / align * align, align);
  Memory m(std::aligned_alloc(align, bytes));
  if (m == nullptr) throw std::bad_alloc();
  if (align == huge) (void)madvise(m.get(), bytes, MADV_HUGEPAGE);
  return m;
}

// A cache buffer filled with small pseudo-random values (no NaN, no
// denormals).
struct Buffer {
  Memory memory;
  Buffer(size_t n, CacheDType t, uint32_t seed) {
    memory = AlignedMemory(n * CacheDTypeSize(t));
    if (t == CacheDType::kBF16) {
      auto* bf16 = static_cast<uint16_t*>(memory.get());
#pragma omp parallel for
      for (size_t i = 0; i < n; ++i) {
        uint32_t y = static_cast<uint32_t>(i) * 2654435761u + seed;
        bf16[i] =
            static_cast<uint16_t>(0x3c00 | (y >> 25));  // ~[0.0078, 0.0155]
      }
    } else {
      auto* f32 = static_cast<float*>(memory.get());
      uint32_t x = seed * 2654435761u + 1;
      for (size_t i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        f32[i] = ((static_cast<float>(x >> 9) / static_cast<float>(1u << 23)) -
                  0.5f) *
                 0.1f;
      }
    }
  }
  const void* data() const { return memory.get(); }
};

std::vector<float> Filled(size_t n, float v) {
  return std::vector<float>(n, v);
}

// L3's size as sysfs gives it ("32768K"; sysconf's figure is wrong on some
// VMs), else 32 MiB.
size_t LastLevelCacheBytes() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index3/size");
  size_t n = 0;
  char unit = 0;
  if (!(in >> n) || n == 0) return size_t{32} << 20;
  in >> unit;
  return unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : n;
}

// A 256 MiB buffer read with the bench's threads, for two jobs.
// Stream(): one pass over all of it, the streaming-read reference, timed as a
// variant among the steps (same shuffled order, same eviction), so that each
// step's fraction of it compares two measurements taken in the same minutes of
// a machine whose bandwidth moves.
// Evict(): a pass over its first 2×L3, run before every timed step so that
// every step starts with none of its cache in L3, as in a real decode where
// the other layers' weights and caches pass through it between two steps of
// one layer. Without it a step found up to L3's size of its cache left by the
// previous step when that one read the same buffers (the LRKV variants share
// one cache): `plane`, which always ran right after `no-RoPE` on it, measured
// 3-10 % faster than the identical call.
class ReadBuffer {
 public:
  static constexpr size_t kFloats = size_t{64} << 20;
  ReadBuffer()
      : memory_(AlignedMemory(kFloats * sizeof(float))),
        evict_floats_(std::clamp<size_t>(2 * LastLevelCacheBytes(),
                                         size_t{16} << 20, kFloats * 4) /
                      4) {
    auto* a = static_cast<float*>(memory_.get());
    std::fill(a, a + kFloats, 1.0f);
  }
  void Stream() { Sum(kFloats); }
  void Evict() { Sum(evict_floats_); }
  static int64_t StreamBytes() { return kFloats * sizeof(float); }

 private:
  void Sum(size_t floats) {
    const auto* a = static_cast<const float*>(memory_.get());
    double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (size_t i = 0; i < floats; i += 16) {
      float s = 0;
      for (int j = 0; j < 16; ++j) s += a[i + j];
      total += s;
    }
    sink_ = total;
  }
  Memory memory_;
  size_t evict_floats_;
  volatile double sink_ = 0;
};

struct Variant : TimedVariant {
  std::function<void()> step;
};

float ScaleOf(const DecodeBenchOptions& o) {
  return 1.0f / std::sqrt(static_cast<float>(o.head_dim));
}

// A factored step of the options' batch and heads over a cache of `dim`-wide
// shared rows and `kv_heads` latents of `rank`.
FactoredDecodeParams FactoredBenchParams(const DecodeBenchOptions& o,
                                         int64_t kv_heads, int64_t dim,
                                         int64_t rank, int64_t context,
                                         int64_t capacity) {
  FactoredDecodeParams p;
  p.batch = o.batch;
  p.heads = o.heads;
  p.kv_heads = kv_heads;
  p.dim = dim;
  p.rank = rank;
  p.length = context;
  p.capacity = capacity;
  p.dtype = o.dtype;
  p.scale = ScaleOf(o);
  return p;
}

}  // namespace

MhaDecodeParams BenchMhaParams(const DecodeBenchOptions& o, int64_t context,
                               int64_t n_kv) {
  MhaDecodeParams p;
  p.batch = o.batch;
  p.heads = o.heads;
  p.kv_heads = n_kv;
  p.head_dim = o.head_dim;
  p.length = p.capacity = context;
  p.dtype = o.dtype;
  p.scale = ScaleOf(o);
  return p;
}

TimedVariant BenchMhaRow(const std::string& name, const DecodeBenchOptions& o,
                         int64_t context, int64_t n_kv) {
  TimedVariant v;
  v.name = name;
  v.config = absl::StrCat("n_kv=", n_kv);
  v.bytes = 2 * o.batch * n_kv * context * o.head_dim * CacheDTypeSize(o.dtype);
  v.macs = 2 * o.batch * o.heads * context * o.head_dim;
  return v;
}

FactoredDecodeParams BenchMlaParams(const DecodeBenchOptions& o,
                                    int64_t context, int64_t latent) {
  return FactoredBenchParams(o, 1, latent, 0, context, context);
}

FactoredDecodeParams BenchLrkvParams(const DecodeBenchOptions& o,
                                     int64_t context, int64_t capacity) {
  return FactoredBenchParams(o, o.kv_heads > 0 ? o.kv_heads : o.heads,
                             o.head_dim, o.rank, context, capacity);
}

TimedVariant BenchMlaRow(const DecodeBenchOptions& o, int64_t context,
                         int64_t latent) {
  TimedVariant v;
  v.name = "mla";
  v.config = absl::StrCat("d_c=", latent, " absorbed");
  v.bytes = o.batch * context * latent * CacheDTypeSize(o.dtype);
  v.macs = 2 * o.batch * o.heads * context * latent;
  return v;
}

std::vector<std::vector<size_t>> InterleavedOrder(size_t variants,
                                                  int iterations) {
  std::vector<size_t> order(variants);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 shuffle(12345);
  std::vector<std::vector<size_t>> orders;
  for (int it = 0; it < iterations; ++it) {
    std::shuffle(order.begin(), order.end(), shuffle);
    orders.push_back(order);
  }
  return orders;
}

absl::StatusOr<BenchBaselines> BaselinesFor(const DecodeBenchOptions& o) {
  const int64_t H = o.heads, dh = o.head_dim, r = o.rank;
  const int64_t hkv = o.kv_heads > 0 ? o.kv_heads : H;
  if (H < 1 || dh < 2 || dh % 2 != 0 || r < 0 || r > dh || o.batch < 1 ||
      hkv > H || H % hkv != 0 || o.iterations < 1 || o.contexts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench decode: need heads >= 1, even head dim, 0 <= rank <= head dim "
        "(got ",
        r, "), kv heads dividing heads, batch and iterations >= 1"));
  }
  for (int64_t l : o.contexts) {
    if (l < 1 || l > (1 << 22)) {
      return absl::InvalidArgumentError(
          absl::StrCat("context ", l, " must lie in [1, 4194304]"));
    }
  }
  BenchBaselines b;
  b.kv_heads = hkv;
  b.mla_latent = 2 * (dh + hkv * r);
  b.cache_ratio = static_cast<double>(b.mla_latent) / (2 * H * dh);
  b.gqa_kv_heads = 1;
  for (int64_t n = 1; n <= H; ++n) {
    if (H % n == 0 && 2 * n * dh <= b.mla_latent) b.gqa_kv_heads = n;
  }
  return b;
}

void AppendContextRows(int64_t context, std::vector<TimedVariant> variants,
                       DecodeBenchReport* report) {
  double mha_median = 0, stream_gbps = 0;
  for (auto& v : variants) {
    std::sort(v.times_ms.begin(), v.times_ms.end());
    const double median = v.times_ms[v.times_ms.size() / 2];
    if (v.name == "stream") stream_gbps = v.bytes / (median * 1e-3) / 1e9;
    if (v.name == "mha") mha_median = median;
  }
  report->stream_gbps = std::max(report->stream_gbps, stream_gbps);
  for (const auto& v : variants) {
    DecodeBenchRow row;
    row.variant = v.name;
    row.config = v.config;
    row.context = context;
    row.median_ms = v.times_ms[v.times_ms.size() / 2];
    row.min_ms = v.times_ms.front();
    row.max_ms = v.times_ms.back();
    row.bytes_per_step = v.bytes;
    row.macs_per_step = v.macs;
    row.host_us = v.host_us;
    row.gbps = v.bytes / (row.median_ms * 1e-3) / 1e9;
    row.bandwidth_fraction = stream_gbps > 0 ? row.gbps / stream_gbps : 0;
    row.ratio_to_mha =
        v.name == "stream" || mha_median <= 0 ? 0 : row.median_ms / mha_median;
    report->rows.push_back(row);
  }
}

// The LRKV rows at context L: one cache (four segment arrays) for every mode.
void AddLrkvVariants(const DecodeBenchOptions& o, int64_t L, int64_t hkv,
                     const float* q, const float* ql, float* out, float* out_l,
                     std::vector<std::shared_ptr<void>>* keep,
                     std::vector<std::unique_ptr<Variant>>* variants) {
  const int64_t H = o.heads, dh = o.head_dim, r = o.rank, B = o.batch;
  const int64_t es = CacheDTypeSize(o.dtype);
  // LRKV: one cache (four segment arrays) for every mode, tiled for the fused
  // kernel (capacity a whole number of tiles; bf16 keys of odd width carry
  // one zero column, counted in the bytes read).
  const int64_t cap = (L + kCacheTile - 1) / kCacheTile * kCacheTile;
  const int64_t lat = hkv * r;
  const int64_t k_stride = TiledStride(o.dtype, true, dh);
  const int64_t zk_stride = TiledStride(o.dtype, true, lat);
  auto ks = std::make_shared<Buffer>(B * cap * k_stride, o.dtype, 4);
  auto vs = std::make_shared<Buffer>(B * cap * dh, o.dtype, 5);
  auto zk = std::make_shared<Buffer>(B * cap * std::max<int64_t>(zk_stride, 1),
                                     o.dtype, 6);
  auto zv =
      std::make_shared<Buffer>(B * cap * std::max<int64_t>(lat, 1), o.dtype, 7);
  keep->insert(keep->end(), {ks, vs, zk, zv});
  auto bt = std::make_shared<std::vector<float>>(Filled(hkv * r * dh, 0.01f));
  auto cos = std::make_shared<std::vector<float>>(Filled(cap * dh / 2, 0.8f));
  auto sin = std::make_shared<std::vector<float>>(Filled(cap * dh / 2, 0.6f));
  keep->insert(keep->end(), {bt, cos, sin});
  FactoredDecodeParams lp = BenchLrkvParams(o, L, cap);
  lp.layout = CacheLayout::kTiles;
  lp.k = {ks->data(), k_stride};
  lp.v = {vs->data(), dh};
  lp.zk = {zk->data(), zk_stride};
  lp.zv = {zv->data(), lat};
  lp.q = q;
  lp.q_latent = ql;
  lp.out = out;
  lp.out_latent = out_l;
  const int64_t lrkv_bytes = B * L * (k_stride + dh + zk_stride + lat) * es;
  // Modes: no RoPE and plane read the same cache the same way (plane rotates
  // the latents when they are written); reconstruct rebuilds B_h z per
  // position and runs on rows. The rows line is the no-RoPE step on the same
  // buffers read as rows, to show what the tiled layout buys.
  struct Mode {
    const char* name;
    CacheLayout layout;
    bool reconstruct;
    bool bf16_operands;
  };
  std::vector<Mode> modes = {{"lrkv-norope", CacheLayout::kTiles, false, false},
                             {"lrkv-plane", CacheLayout::kTiles, false, false}};
  if (o.dtype == CacheDType::kBF16) {
    // The same steps with queries and weights rounded to bf16 (as
    // FlashAttention/FlashMLA do for bf16 caches).
    modes.push_back({"lrkv-norope-bf16", CacheLayout::kTiles, false, true});
    modes.push_back({"lrkv-plane-bf16", CacheLayout::kTiles, false, true});
  }
  modes.push_back({"lrkv-norope-rows", CacheLayout::kRows, false, false});
  modes.push_back({"lrkv-reconstruct", CacheLayout::kRows, true, false});
  for (const Mode& m : modes) {
    auto var = std::make_unique<Variant>();
    var->name = m.name;
    var->config = absl::StrCat(
        "r=", r, m.layout == CacheLayout::kTiles ? " tiles" : " rows",
        m.bf16_operands ? " bf16 q,p" : "");
    var->bytes = lrkv_bytes;
    FactoredDecodeParams p = lp;
    p.layout = m.layout;
    p.bf16_operands = m.bf16_operands;
    if (m.reconstruct) {
      p.up_k_t = bt->data();
      p.rope_cos = cos->data();
      p.rope_sin = sin->data();
      var->macs = 2 * B * L * (H * dh + H * r) +
                  B * L * hkv * (r * dh + 2 * dh) + B * H * L * dh;
    } else {
      var->macs = 2 * B * L * (H * dh + H * r);
    }
    var->step = [p] { (void)FactoredDecode(p); };
    variants->push_back(std::move(var));
  }
}

// Times every variant o.iterations times, each sweep in an interleaved order,
// the caches evicted before each step.
void TimeInterleaved(std::vector<std::unique_ptr<Variant>>& variants,
                     ReadBuffer& reads, int64_t iterations) {
  // Interleaved and shuffled: a rotating order kept the neighbours fixed,
  // and the step after MHA's 200 MB stream measured a few percent slower,
  // no-RoPE (always after MLA) a few percent slower than plane after it.
  for (auto& v : variants) v->step();  // warm-up
  for (const auto& order : InterleavedOrder(variants.size(), iterations)) {
    for (size_t i : order) {
      auto& v = variants[i];
      reads.Evict();
      const auto t0 = Clock::now();
      v->step();
      v->times_ms.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
}

absl::StatusOr<DecodeBenchReport> RunDecodeBench(const DecodeBenchOptions& o) {
  auto baselines = BaselinesFor(o);
  if (!baselines.ok()) return baselines.status();
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int64_t H = o.heads, dh = o.head_dim, r = o.rank, B = o.batch;
  const int64_t hkv = baselines->kv_heads, gqa = baselines->gqa_kv_heads;
  DecodeBenchReport report;
  report.options = o;
  report.threads = omp_get_max_threads();
  report.isa = KernelIsa();
  report.cache_ratio = baselines->cache_ratio;
  auto reads = std::make_shared<ReadBuffer>();
  const int64_t dc = baselines->mla_latent;

  for (int64_t L : o.contexts) {
    std::vector<std::unique_ptr<Variant>> variants;
    std::vector<std::shared_ptr<void>> keep;
    auto out = std::make_shared<std::vector<float>>(B * H * std::max(dh, dc));
    auto out_l =
        std::make_shared<std::vector<float>>(B * H * std::max<int64_t>(r, 1));
    auto q = std::make_shared<std::vector<float>>(
        Filled(B * H * std::max(dh, dc), 0.01f));
    auto ql = std::make_shared<std::vector<float>>(
        Filled(B * H * std::max<int64_t>(r, 1), 0.01f));
    keep.insert(keep.end(), {out, out_l, q, ql});
    auto add_mha = [&](const std::string& name, int64_t n_kv,
                       bool position_major) {
      auto k = std::make_shared<Buffer>(B * n_kv * L * dh, o.dtype, 1);
      auto v = std::make_shared<Buffer>(B * n_kv * L * dh, o.dtype, 2);
      keep.insert(keep.end(), {k, v});
      MhaDecodeParams p = BenchMhaParams(o, L, n_kv);
      p.position_major = position_major;
      p.k = k->data();
      p.v = v->data();
      p.q = q->data();
      p.out = out->data();
      auto var = std::make_unique<Variant>();
      static_cast<TimedVariant&>(*var) = BenchMhaRow(name, o, L, n_kv);
      if (position_major) var->config += " position-major";
      var->step = [p] { (void)MhaDecode(p); };
      variants.push_back(std::move(var));
    };
    add_mha("mha", H, false);
    if (gqa < H) add_mha("gqa", gqa, false);
    // The GQA source an LRKV conversion of --kv-heads came from, in the
    // decode engines' position-major cache (the kernel `bench generate` times
    // for the source).
    if (hkv < H) add_mha("source", hkv, true);
    {  // MLA, absorbed (no RoPE), equal cache: the latent is read as key and
       // value.
      auto c = std::make_shared<Buffer>(B * L * dc, o.dtype, 3);
      keep.push_back(c);
      FactoredDecodeParams p = BenchMlaParams(o, L, dc);
      p.k = p.v = {c->data(), dc};
      p.q = q->data();
      p.out = out->data();
      auto var = std::make_unique<Variant>();
      static_cast<TimedVariant&>(*var) = BenchMlaRow(o, L, dc);
      var->step = [p] { (void)FactoredDecode(p); };
      variants.push_back(std::move(var));
    }
    AddLrkvVariants(o, L, hkv, q->data(), ql->data(), out->data(),
                    out_l->data(), &keep, &variants);
    {
      auto var = std::make_unique<Variant>();
      var->name = "stream";
      var->config = "read 256 MiB";
      var->bytes = ReadBuffer::StreamBytes();
      var->step = [reads] { reads->Stream(); };
      variants.push_back(std::move(var));
    }
    TimeInterleaved(variants, *reads, o.iterations);
    std::vector<TimedVariant> timed;
    for (auto& v : variants) timed.push_back(std::move(*v));
    AppendContextRows(L, std::move(timed), &report);
  }
  return report;
}

std::string DecodeBenchReport::ToTable() const {
  const bool gpu = device != "cpu";
  std::string out = absl::StrFormat(
      "decode step: H=%d, H_kv=%d, d_h=%d, r=%d, batch %d, %s cache, %s\n"
      "LRKV cache = %.4f of MHA; streaming read: the \"stream\" rows (%s, "
      "timed among the steps; %%stream is against the row of the same "
      "context), up to %.1f GB/s\n\n",
      options.heads, options.kv_heads > 0 ? options.kv_heads : options.heads,
      options.head_dim, options.rank, options.batch,
      options.dtype == CacheDType::kBF16 ? "bf16" : "fp32",
      gpu ? absl::StrCat("CUDA on ", device)
          : absl::StrFormat("%d threads, %s kernels", threads, isa),
      cache_ratio, gpu ? "a read kernel over 1 GiB" : "same threads",
      stream_gbps);
  if (gpu) {
    absl::StrAppend(
        &out,
        "LRKV on CUDA: the row layout; reconstruct mode is CPU-only. Each "
        "step is two kernels (split, merge) timed with CUDA events after a "
        "read of 2x L2. bf16 caches run on tensor cores (mma.m16n8k16, "
        "queries and softmax weights as bf16 hi + lo: exact) where a block's "
        "group has at most 16 heads; fp32 caches and larger groups on CUDA "
        "cores\n\n");
  } else {
    absl::StrAppend(
        &out, "LRKV \"tiles\": the cache in the tiled layout, read by ",
        TiledKernelAvailable() ? "the fused AVX512-BF16 kernel"
                               : "a copy to rows (no AVX512-BF16 here)",
        "; \"rows\": the row layout; \"bf16 q,p\": queries and softmax "
        "weights rounded to bf16 before the multiply (else kept to ~16 "
        "bits)\n\n");
  }
  absl::StrAppend(&out,
                  "context  variant           config                median ms "
                  "    min ms     max ms   MB/step     GB/s  %stream  vs MHA   "
                  "GMAC/step",
                  gpu ? "  host us\n" : "\n");
  for (const auto& r : rows) {
    absl::StrAppendFormat(&out,
                          "%7d  %-17s %-20s %10.3f %10.3f %10.3f %9.1f %8.1f "
                          "%7.0f%% ",
                          r.context, r.variant, r.config, r.median_ms, r.min_ms,
                          r.max_ms, r.bytes_per_step / 1e6, r.gbps,
                          100 * r.bandwidth_fraction);
    if (r.variant == "stream") {
      absl::StrAppend(&out, "      -           -", gpu ? "        -\n" : "\n");
    } else {
      absl::StrAppendFormat(&out, "%7.3f %11.3f", r.ratio_to_mha,
                            r.macs_per_step / 1e9);
      absl::StrAppend(&out, gpu ? absl::StrFormat(" %8.1f\n", r.host_us)
                                : std::string("\n"));
    }
  }
  return out;
}

std::string DecodeBenchReport::ToJson() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& r : rows) {
    rows_json.push_back({{"context", r.context},
                         {"variant", r.variant},
                         {"config", r.config},
                         {"median_ms", r.median_ms},
                         {"min_ms", r.min_ms},
                         {"max_ms", r.max_ms},
                         {"bytes_per_step", r.bytes_per_step},
                         {"gbps", r.gbps},
                         {"bandwidth_fraction", r.bandwidth_fraction},
                         {"ratio_to_mha", r.ratio_to_mha},
                         {"macs_per_step", r.macs_per_step},
                         {"host_us", r.host_us}});
  }
  nlohmann::json j = {
      {"heads", options.heads},
      {"kv_heads", options.kv_heads > 0 ? options.kv_heads : options.heads},
      {"head_dim", options.head_dim},
      {"rank", options.rank},
      {"batch", options.batch},
      {"dtype", options.dtype == CacheDType::kBF16 ? "bf16" : "fp32"},
      {"device", device},
      {"threads", threads},
      {"isa", isa},
      {"stream_gbps", stream_gbps},
      {"cache_ratio", cache_ratio},
      {"rows", rows_json}};
  return j.dump(2);
}

}  // namespace lrkv::kernels
