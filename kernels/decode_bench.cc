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
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/block_quant.h"
#include "kernels/cache_dtype_option.h"
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

// A cache buffer of n values filled with small pseudo-random values (no NaN,
// no denormals); block types hold the fp32 values quantized (n a multiple of
// kQuantBlock).
struct Buffer {
  Memory memory;
  Buffer(size_t n, CacheDType t, uint32_t seed) {
    memory = AlignedMemory(CacheBytes(t, static_cast<int64_t>(n)));
    if (t == CacheDType::kBF16) {
      auto* bf16 = static_cast<uint16_t*>(memory.get());
#pragma omp parallel for
      for (size_t i = 0; i < n; ++i) {
        uint32_t y = static_cast<uint32_t>(i) * 2654435761u + seed;
        bf16[i] =
            static_cast<uint16_t>(0x3c00 | (y >> 25));  // ~[0.0078, 0.0155]
      }
    } else if (t == CacheDType::kF32) {
      FillFloats(static_cast<float*>(memory.get()), n, seed);
    } else {
      // A block row at a time: the fp32 values of a long context would not
      // fit beside the cache.
      const size_t row = 64 * kQuantBlock;
      std::vector<float> values(row);
      auto* out = static_cast<uint8_t*>(memory.get());
      for (size_t i = 0; i < n; i += row) {
        const size_t count = std::min(row, n - i);
        FillFloats(values.data(), count, seed + static_cast<uint32_t>(i));
        QuantizeBlocks(t == CacheDType::kQ8_0 ? DType::kQ8_0 : DType::kQ4_0,
                       values.data(), count,
                       out + CacheBytes(t, static_cast<int64_t>(i)));
      }
    }
  }
  static void FillFloats(float* f32, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      f32[i] =
          ((static_cast<float>(x >> 9) / static_cast<float>(1u << 23)) - 0.5f) *
          0.1f;
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
  std::function<absl::Status()> step;
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
  v.cache = o.dtype;
  v.bytes = 2 * CacheBytes(o.dtype, o.batch * n_kv * context * o.head_dim);
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
  v.cache = o.dtype;
  v.bytes = CacheBytes(o.dtype, o.batch * context * latent);
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
  double stream_gbps = 0;
  // Medians by storage and variant: MHA's of each storage, and every
  // variant's with the first storage.
  std::map<std::pair<CacheDType, std::string>, double> medians;
  for (auto& v : variants) {
    std::sort(v.times_ms.begin(), v.times_ms.end());
    const double median = v.times_ms[v.times_ms.size() / 2];
    if (v.name == "stream") stream_gbps = v.bytes / (median * 1e-3) / 1e9;
    medians[{v.cache, v.name}] = median;
  }
  const CacheDType first = report->options.cache_dtypes.empty()
                               ? report->options.dtype
                               : report->options.cache_dtypes.front();
  auto median_of = [&](CacheDType t, const std::string& name) {
    auto it = medians.find({t, name});
    return it == medians.end() ? 0.0 : it->second;
  };
  report->stream_gbps = std::max(report->stream_gbps, stream_gbps);
  for (const auto& v : variants) {
    const bool stream = v.name == "stream";
    DecodeBenchRow row;
    row.variant = v.name;
    row.config = v.config;
    row.cache = stream ? "" : CacheDTypeName(v.cache);
    row.context = context;
    row.median_ms = v.times_ms[v.times_ms.size() / 2];
    row.min_ms = v.times_ms.front();
    row.max_ms = v.times_ms.back();
    row.bytes_per_step = v.bytes;
    row.macs_per_step = v.macs;
    row.host_us = v.host_us;
    row.gbps = v.bytes / (row.median_ms * 1e-3) / 1e9;
    row.bandwidth_fraction = stream_gbps > 0 ? row.gbps / stream_gbps : 0;
    const double mha = median_of(v.cache, "mha");
    const double same = median_of(first, v.name);
    row.ratio_to_mha = stream || mha <= 0 ? 0 : row.median_ms / mha;
    row.ratio_to_first_cache = stream || same <= 0 ? 0 : row.median_ms / same;
    report->rows.push_back(row);
  }
}

namespace {

// The LRKV rows at context L: one cache (four segment arrays) for every mode.
void AddLrkvVariants(const DecodeBenchOptions& o, int64_t L, int64_t hkv,
                     const float* q, const float* ql, float* out, float* out_l,
                     std::vector<std::shared_ptr<void>>* keep,
                     std::vector<std::unique_ptr<Variant>>* variants) {
  const int64_t H = o.heads, dh = o.head_dim, r = o.rank, B = o.batch;
  // LRKV: one cache (four segment arrays) for every mode, tiled for the fused
  // kernel (capacity a whole number of tiles; bf16 keys of odd width carry
  // one zero column, counted in the bytes read). Block types have no tiled
  // form: their segments are rows of whole blocks, as the engines keep them.
  const bool blocks = IsBlockQuantized(o.dtype);
  const int64_t cap =
      blocks ? L : (L + kCacheTile - 1) / kCacheTile * kCacheTile;
  const int64_t lat = hkv * r;
  const int64_t k_stride = blocks ? dh : TiledStride(o.dtype, true, dh);
  const int64_t zk_stride = blocks ? lat : TiledStride(o.dtype, true, lat);
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
  lp.layout = blocks ? CacheLayout::kRows : CacheLayout::kTiles;
  lp.k = {ks->data(), k_stride};
  lp.v = {vs->data(), dh};
  lp.zk = {zk->data(), zk_stride};
  lp.zv = {zv->data(), lat};
  lp.q = q;
  lp.q_latent = ql;
  lp.out = out;
  lp.out_latent = out_l;
  const int64_t lrkv_bytes =
      CacheBytes(o.dtype, B * L * (k_stride + dh + zk_stride + lat));
  // Modes: no RoPE and plane read the same cache the same way (plane rotates
  // the latents when they are written); reconstruct rebuilds B_h z per
  // position and runs on rows. The rows line is the no-RoPE step on the same
  // buffers read as rows, to show what the tiled layout buys. A block type's
  // one step is plane's, on rows (the engine's quantized layout).
  struct Mode {
    const char* name;
    CacheLayout layout;
    bool reconstruct;
    bool bf16_operands;
  };
  std::vector<Mode> modes;
  if (blocks) {
    modes.push_back({"lrkv-plane", CacheLayout::kRows, false, false});
  } else {
    modes.push_back({"lrkv-norope", CacheLayout::kTiles, false, false});
    modes.push_back({"lrkv-plane", CacheLayout::kTiles, false, false});
  }
  if (o.dtype == CacheDType::kBF16) {
    // The same steps with queries and weights rounded to bf16 (as
    // FlashAttention/FlashMLA do for bf16 caches).
    modes.push_back({"lrkv-norope-bf16", CacheLayout::kTiles, false, true});
    modes.push_back({"lrkv-plane-bf16", CacheLayout::kTiles, false, true});
  }
  if (!blocks) {
    modes.push_back({"lrkv-norope-rows", CacheLayout::kRows, false, false});
    modes.push_back({"lrkv-reconstruct", CacheLayout::kRows, true, false});
  }
  for (const Mode& m : modes) {
    auto var = std::make_unique<Variant>();
    var->name = m.name;
    var->config = absl::StrCat(
        "r=", r, m.layout == CacheLayout::kTiles ? " tiles" : " rows",
        m.bf16_operands ? " bf16 q,p" : "");
    var->bytes = lrkv_bytes;
    var->cache = o.dtype;
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
    var->step = [p] { return FactoredDecode(p); };
    variants->push_back(std::move(var));
  }
}

// Adds `note` to the report's notes unless it is there (each context meets
// the same refusals).
void AddNote(const std::string& note, std::vector<std::string>* notes) {
  if (std::find(notes->begin(), notes->end(), note) == notes->end())
    notes->push_back(note);
}

// Times every variant o.iterations times, each sweep in an interleaved order,
// the caches evicted before each step. A variant whose warm-up step the
// kernel refuses (a storage its shape does not fit) is dropped, the kernel's
// reason noted in the report.
void TimeInterleaved(std::vector<std::unique_ptr<Variant>>& variants,
                     ReadBuffer& reads, int64_t iterations,
                     DecodeBenchReport* report) {
  // Interleaved and shuffled: a rotating order kept the neighbours fixed,
  // and the step after MHA's 200 MB stream measured a few percent slower,
  // no-RoPE (always after MLA) a few percent slower than plane after it.
  std::vector<std::unique_ptr<Variant>> runnable;
  for (auto& v : variants) {
    if (const absl::Status st = v->step(); st.ok()) {
      runnable.push_back(std::move(v));
    } else {
      AddNote(absl::StrCat(v->name, " (", CacheDTypeName(v->cache),
                           "): ", st.message()),
              &report->notes);
    }
  }
  variants = std::move(runnable);
  for (const auto& order : InterleavedOrder(variants.size(), iterations)) {
    for (size_t i : order) {
      auto& v = variants[i];
      reads.Evict();
      const auto t0 = Clock::now();
      (void)v->step();
      v->times_ms.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
}

// Whether a block type's rows of `width` values hold whole blocks; else the
// reason, for the report's notes (a buffer of partial blocks is never built).
bool FitsBlocks(CacheDType t, const char* variant, const char* what,
                int64_t width, std::vector<std::string>* notes) {
  if (!IsBlockQuantized(t) || width % kQuantBlock == 0) return true;
  const std::string note = absl::StrCat(
      variant, " (", CacheDTypeName(t), "): blocks of ", kQuantBlock,
      " values do not divide the ", what, " of ", width, "; left out");
  AddNote(note, notes);
  return false;
}

// The steps of one storage (od.dtype) at context L: MHA, the budget-matched
// GQA, the source's position-major cache where it has fewer KV heads, MLA and
// the LRKV modes. The query and output buffers are the context's, shared.
void AddStorageVariants(const DecodeBenchOptions& od,
                        const BenchBaselines& base, int64_t L, const float* q,
                        const float* ql, float* out, float* out_l,
                        std::vector<std::shared_ptr<void>>* keep,
                        std::vector<std::unique_ptr<Variant>>* variants,
                        std::vector<std::string>* notes) {
  const int64_t H = od.heads, dh = od.head_dim, B = od.batch;
  const int64_t hkv = base.kv_heads, dc = base.mla_latent;
  auto add_mha = [&](const std::string& name, int64_t n_kv,
                     bool position_major) {
    auto k = std::make_shared<Buffer>(B * n_kv * L * dh, od.dtype, 1);
    auto v = std::make_shared<Buffer>(B * n_kv * L * dh, od.dtype, 2);
    keep->insert(keep->end(), {k, v});
    MhaDecodeParams p = BenchMhaParams(od, L, n_kv);
    p.position_major = position_major;
    p.k = k->data();
    p.v = v->data();
    p.q = q;
    p.out = out;
    auto var = std::make_unique<Variant>();
    static_cast<TimedVariant&>(*var) = BenchMhaRow(name, od, L, n_kv);
    if (position_major) var->config += " position-major";
    var->step = [p] { return MhaDecode(p); };
    variants->push_back(std::move(var));
  };
  add_mha("mha", H, false);
  if (base.gqa_kv_heads < H) add_mha("gqa", base.gqa_kv_heads, false);
  // The GQA source an LRKV conversion of --kv-heads came from, in the
  // decode engines' position-major cache (the kernel `bench generate` times
  // for the source).
  if (hkv < H) add_mha("source", hkv, true);
  if (FitsBlocks(od.dtype, "mla", "latent d_c", dc, notes)) {
    // MLA, absorbed (no RoPE), equal cache: the latent is read as key and
    // value.
    auto c = std::make_shared<Buffer>(B * L * dc, od.dtype, 3);
    keep->push_back(c);
    FactoredDecodeParams p = BenchMlaParams(od, L, dc);
    p.k = p.v = {c->data(), dc};
    p.q = q;
    p.out = out;
    auto var = std::make_unique<Variant>();
    static_cast<TimedVariant&>(*var) = BenchMlaRow(od, L, dc);
    var->step = [p] { return FactoredDecode(p); };
    variants->push_back(std::move(var));
  }
  if (FitsBlocks(od.dtype, "lrkv", "latent width H_kv*r", hkv * od.rank,
                 notes)) {
    AddLrkvVariants(od, L, hkv, q, ql, out, out_l, keep, variants);
  }
}

}  // namespace

absl::StatusOr<DecodeBenchReport> RunDecodeBench(const DecodeBenchOptions& o) {
  auto baselines = BaselinesFor(o);
  if (!baselines.ok()) return baselines.status();
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const int64_t H = o.heads, dh = o.head_dim, r = o.rank, B = o.batch;
  DecodeBenchReport report;
  report.options = o;
  report.threads = omp_get_max_threads();
  report.isa = KernelIsa();
  report.cache_ratio = baselines->cache_ratio;
  for (CacheDType t : o.cache_dtypes) {
    if (IsBlockQuantized(t) && dh % kQuantBlock != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bench decode: a ", CacheDTypeName(t), " cache stores blocks of ",
          kQuantBlock, " values, which do not divide the head dim of ", dh));
    }
  }
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
    for (CacheDType t : o.cache_dtypes) {
      DecodeBenchOptions od = o;
      od.dtype = t;
      AddStorageVariants(od, *baselines, L, q->data(), ql->data(), out->data(),
                         out_l->data(), &keep, &variants, &report.notes);
    }
    {
      auto var = std::make_unique<Variant>();
      var->name = "stream";
      var->config = "read 256 MiB";
      var->bytes = ReadBuffer::StreamBytes();
      var->step = [reads] {
        reads->Stream();
        return absl::OkStatus();
      };
      variants.push_back(std::move(var));
    }
    TimeInterleaved(variants, *reads, o.iterations, &report);
    std::vector<TimedVariant> timed;
    for (auto& v : variants) timed.push_back(std::move(*v));
    AppendContextRows(L, std::move(timed), &report);
  }
  return report;
}

namespace {

std::string CacheNames(const DecodeBenchOptions& o) {
  return absl::StrJoin(NamesOf(o.cache_dtypes), ",");
}

}  // namespace

std::string DecodeBenchReport::ToTable() const {
  const bool gpu = device != "cpu";
  std::string out = absl::StrFormat(
      "decode step: H=%d, H_kv=%d, d_h=%d, r=%d, batch %d, %s cache, %s\n"
      "LRKV cache = %.4f of MHA; streaming read: the \"stream\" rows (%s, "
      "timed among the steps; %%stream is against the row of the same "
      "context), up to %.1f GB/s\n\n",
      options.heads, options.kv_heads > 0 ? options.kv_heads : options.heads,
      options.head_dim, options.rank, options.batch, CacheNames(options),
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
        "bits); q8/q4 caches (ggml's Q8_0/Q4_0 blocks) are read as rows, their "
        "blocks widened in L1; \"vs first\" is a row's time over the same "
        "variant's with the first cache dtype, in the same run\n\n");
  }
  for (const auto& note : notes) absl::StrAppend(&out, "note: ", note, "\n");
  if (!notes.empty()) absl::StrAppend(&out, "\n");
  absl::StrAppend(&out,
                  "context  variant           cache config                "
                  "median ms     min ms     max ms   MB/step     GB/s  %stream "
                  " vs MHA vs first   GMAC/step",
                  gpu ? "  host us\n" : "\n");
  for (const auto& r : rows) {
    absl::StrAppendFormat(&out,
                          "%7d  %-17s %-5s %-20s %10.3f %10.3f %10.3f %9.1f "
                          "%8.1f %7.0f%% ",
                          r.context, r.variant, r.cache, r.config, r.median_ms,
                          r.min_ms, r.max_ms, r.bytes_per_step / 1e6, r.gbps,
                          100 * r.bandwidth_fraction);
    if (r.variant == "stream") {
      absl::StrAppend(&out, "      -        -           -",
                      gpu ? "        -\n" : "\n");
    } else {
      absl::StrAppendFormat(
          &out, "%7.3f %8s %11.3f", r.ratio_to_mha,
          r.ratio_to_first_cache > 0
              ? absl::StrFormat("%.3f", r.ratio_to_first_cache)
              : std::string("-"),
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
                         {"cache", r.cache},
                         {"config", r.config},
                         {"median_ms", r.median_ms},
                         {"min_ms", r.min_ms},
                         {"max_ms", r.max_ms},
                         {"bytes_per_step", r.bytes_per_step},
                         {"gbps", r.gbps},
                         {"bandwidth_fraction", r.bandwidth_fraction},
                         {"ratio_to_mha", r.ratio_to_mha},
                         {"ratio_to_first_cache", r.ratio_to_first_cache},
                         {"macs_per_step", r.macs_per_step},
                         {"host_us", r.host_us}});
  }
  nlohmann::json j = {
      {"heads", options.heads},
      {"kv_heads", options.kv_heads > 0 ? options.kv_heads : options.heads},
      {"head_dim", options.head_dim},
      {"rank", options.rank},
      {"batch", options.batch},
      {"cache_dtypes", NamesOf(options.cache_dtypes)},
      {"device", device},
      {"threads", threads},
      {"isa", isa},
      {"stream_gbps", stream_gbps},
      {"cache_ratio", cache_ratio},
      {"notes", notes},
      {"rows", rows_json}};
  return j.dump(2);
}

}  // namespace lrkv::kernels
