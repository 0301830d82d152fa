// The tensor-core split kernel for bf16 caches. A block takes a group of at
// most 16 query heads (the m of every product, padded with zero rows) over a
// chunk of positions, T (16 or 32) at a time:
//   stage   cp.async into a ring of `stages` tiles, so that several tiles'
//           loads are in flight while one computes;
//   scores  S (16 heads × T positions) = Q' · K'ᵀ with mma.m16n8k16, where
//           K' = [k_shared | z_K] and Q' = [q | block-diagonal q_latent]: row h
//           holds head h's latent query in its KV head's slice of z_K and
//           zeros elsewhere, so the shared key and all latents go through one
//           product. Eight warps over (8-position blocks × feature slices),
//           summed in shared memory;
//   softmax warp per head (online), lane per position;
//   values  O (16 × [v | z_V]) += P · [v | z_V], each warp owning a set of
//           8-column blocks in registers, rescaled per row by the online
//           softmax. Of a z_V block only the rows of its KV head's query heads
//           are kept.
// Queries and weights enter the products as bf16 hi + lo (two products each),
// so the result is as exact as fp32 arithmetic on the bf16 cache; rounding
// them to one bf16 (FlashAttention's choice) measured only ~5 % faster here and
// missed the bf16 tolerance on a QK-norm-scaled case. Staged rows are padded
// with zeros to a multiple of 16 features and every row pitch is an odd
// multiple of 16 bytes, so that ldmatrix's eight row addresses fall in
// distinct banks.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/split_kernel.cuh"
#include "base/status_macros.h"

namespace lrkv::kernels::cuda {
namespace {

constexpr int kRows = 16;  // query heads per block, padded
// Warps per block: 8 for 32-position tiles (narrow rows, two blocks per SM),
// 16 for 16-position tiles (wide rows: a block fills an SM's shared memory,
// and 8 warps left the schedulers without a ready warp three cycles in four).
__host__ __device__ constexpr int WarpsFor(int tile) {
  return tile == 32 ? 8 : 16;
}

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void LoadMatrixX4(uint32_t (&r)[4], const void* p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(SharedAddress(p)));
}

__device__ __forceinline__ void LoadMatrixX2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(SharedAddress(p)));
}

__device__ __forceinline__ void LoadMatrixX2Transposed(uint32_t (&r)[2],
                                                       const void* p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
      : "=r"(r[0]), "=r"(r[1])
      : "r"(SharedAddress(p)));
}

// c += a · b for a 16×16 bf16 A, a 16×8 bf16 B and a 16×8 fp32 C.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4],
                                    const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__host__ __device__ inline int RoundUp(int x, int to) {
  return (x + to - 1) / to * to;
}

// bf16 elements per row for `padded` features: an odd multiple of 16 bytes.
__host__ __device__ inline int MmaPitch(int padded) {
  return padded == 0 ? 0 : (RoundUp(padded * 2, 32) + 16) / 2;
}

// Where everything lies in shared memory (bytes; every part 16-aligned), for
// a.tile positions per tile and a.stages tiles in the ring.
struct MmaLayout {
  int tile = 16;
  int dim_pad = 0, lat_pad = 0;  // features: shared [0, dim_pad), latent after
  int q_pitch = 0, k_pitch = 0, v_pitch = 0, zk_pitch = 0, zv_pitch = 0;
  int p_pitch = 0;
  int q_offset = 0, q_lo_offset = 0, tiles_offset = 0, tile_bytes = 0;
  int partial_offset = 0, p_offset = 0, p_lo_offset = 0;
  int stats_offset = 0, total = 0;

  __host__ __device__ explicit MmaLayout(const SplitArgs& a) {
    tile = a.tile;
    const int lat = a.latent_groups * a.rank;
    dim_pad = RoundUp(a.dim, 16);
    lat_pad = RoundUp(lat, 16);
    q_pitch = MmaPitch(dim_pad + lat_pad);
    k_pitch = MmaPitch(dim_pad);
    v_pitch = a.shared_kv ? 0 : MmaPitch(dim_pad);
    zk_pitch = MmaPitch(lat_pad);
    zv_pitch = MmaPitch(lat_pad);
    p_pitch = MmaPitch(tile);
    q_offset = 0;
    q_lo_offset = kRows * q_pitch * 2;
    tiles_offset = 2 * kRows * q_pitch * 2;
    tile_bytes = tile * (k_pitch + v_pitch + zk_pitch + zv_pitch) * 2;
    partial_offset = tiles_offset + a.stages * tile_bytes;
    // Score partials: one 16 × tile plane per feature slice.
    p_offset =
        partial_offset + (WarpsFor(tile) / (tile / 8)) * kRows * tile * 4;
    p_lo_offset = p_offset + kRows * p_pitch * 2;
    stats_offset = p_lo_offset + kRows * p_pitch * 2;
    total = stats_offset + 3 * kRows * 4;
  }
  __host__ __device__ int value_blocks() const {
    return (dim_pad + lat_pad) / 8;
  }
};

// cp.async.wait_group takes an immediate: wait until at most n groups are in
// flight, for n below the largest ring.
__device__ __forceinline__ void WaitForAllBut(int n) {
  switch (n) {
    case 0:
      __pipeline_wait_prior(0);
      break;
    case 1:
      __pipeline_wait_prior(1);
      break;
    case 2:
      __pipeline_wait_prior(2);
      break;
    case 3:
      __pipeline_wait_prior(3);
      break;
    case 4:
      __pipeline_wait_prior(4);
      break;
    case 5:
      __pipeline_wait_prior(5);
      break;
    case 6:
      __pipeline_wait_prior(6);
      break;
    default:
      __pipeline_wait_prior(7);
  }
}

// Splits x into bf16 hi + lo (hi + lo carries ~16 mantissa bits).
__device__ __forceinline__ void SplitBf16(float x, bf16* hi, bf16* lo) {
  const bf16 h = __float2bfloat16(x);
  *hi = h;
  *lo = __float2bfloat16(x - __bfloat162float(h));
}

// NB: 8-column value blocks per warp; T: positions per tile (16 or 32).
// Narrow rows (MHA/GQA: few value blocks) are held to two blocks per SM's
// registers, so that one block's barriers overlap the other's work.
template <int NB, int T>
__global__ void __launch_bounds__(32 * WarpsFor(T), NB <= 4 ? 2 : 1)
    MmaSplitKernel(SplitArgs a, float* ws_m, float* ws_l, float* ws_acc) {
  constexpr int kPositionBlocks = T / 8;
  constexpr int kWarps = WarpsFor(T), kThreads = 32 * kWarps;
  constexpr int kSlices = kWarps / kPositionBlocks;  // feature slices
  extern __shared__ __align__(16) unsigned char smem[];
  const MmaLayout lay(a);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = lane >> 2, pair = (lane & 3) * 2;  // fragment coordinates
  const int heads = a.heads, g = heads / a.latent_groups, r = a.rank;
  const int lat = a.latent_groups * r, width = a.dim + r;
  const int64_t group = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int64_t b = group / a.groups_per_sequence;
  const int64_t kvh = group % a.groups_per_sequence;
  const int64_t t0 = split * a.chunk;
  const int64_t t1 = min(a.length, t0 + a.chunk);
  bf16* qa = reinterpret_cast<bf16*>(smem + lay.q_offset);
  bf16* qa_lo = reinterpret_cast<bf16*>(smem + lay.q_lo_offset);
  uint32_t* tiles = reinterpret_cast<uint32_t*>(smem + lay.tiles_offset);
  float* partial = reinterpret_cast<float*>(smem + lay.partial_offset);
  bf16* pm = reinterpret_cast<bf16*>(smem + lay.p_offset);
  bf16* pm_lo = reinterpret_cast<bf16*>(smem + lay.p_lo_offset);
  float* m = reinterpret_cast<float*>(smem + lay.stats_offset);
  float* l = m + kRows;
  float* corr = l + kRows;
  const int64_t tile_words = TileWords(a);

  // Zeros under Q', the ring (its padding is never copied over) and P.
  for (int i = threadIdx.x * 16; i < lay.stats_offset; i += kThreads * 16) {
    *reinterpret_cast<uint4*>(smem + i) = make_uint4(0, 0, 0, 0);
  }
  if (threadIdx.x < kRows) {
    m[threadIdx.x] = -INFINITY;
    l[threadIdx.x] = 0;
    corr[threadIdx.x] = 1;
  }
  __syncthreads();
  // Scores in base 2 (the softmax runs on exp2; m is turned back into natural
  // units for the merge).
  const float scale = a.scale * 1.4426950408889634f;
  const int64_t row0 = b * a.total_heads + kvh * heads;
  for (int i = threadIdx.x; i < heads * a.dim; i += kThreads) {
    const int h = i / a.dim, c = i - h * a.dim;
    const int at = h * lay.q_pitch + c;
    SplitBf16(a.q[row0 * a.dim + i] * scale, qa + at, qa_lo + at);
  }
  for (int i = threadIdx.x; i < heads * r; i += kThreads) {
    const int h = i / r, c = i - h * r;
    const int at = h * lay.q_pitch + lay.dim_pad + (h / g) * r + c;
    SplitBf16(a.q_latent[row0 * r + i] * scale, qa + at, qa_lo + at);
  }
  auto count_at = [&](int64_t t) {
    return static_cast<int>(min(static_cast<int64_t>(T), t1 - t));
  };
  // The ring: tiles n+1 .. n+stages-1 are in flight while tile n computes.
  const int stages = a.stages;
  for (int s = 0; s < stages - 1; ++s) {
    const int64_t ts = t0 + s * T;
    if (ts < t1) {
      StageTile<bf16>(a, TileRows(a, tiles + s * tile_words), b, kvh, ts,
                      count_at(ts));
    }
    __pipeline_commit();
  }

  float acc[NB][4];
#pragma unroll
  for (int j = 0; j < NB; ++j)
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
  const int ksteps = (lay.dim_pad + lay.lat_pad) / 16;
  const int value_blocks = lay.value_blocks();
  int slot = 0;  // this tile's place in the ring
  for (int64_t t = t0; t < t1;
       t += T, slot = slot + 1 == stages ? 0 : slot + 1) {
    // The slot refilled is the one the previous pass computed on (released by
    // the barrier that ended it).
    const int64_t ahead = t + (stages - 1) * T;
    if (ahead < t1) {
      const int fill = slot == 0 ? stages - 1 : slot - 1;
      StageTile<bf16>(a, TileRows(a, tiles + fill * tile_words), b, kvh, ahead,
                      count_at(ahead));
    }
    __pipeline_commit();
    WaitForAllBut(stages - 1);
    __syncthreads();  // this tile's rows, and Q' on the first pass
    const int count = count_at(t);
    const TileRows rows(a, tiles + slot * tile_words);
    const bf16* k_rows = reinterpret_cast<const bf16*>(rows.k);
    const bf16* zk_rows = reinterpret_cast<const bf16*>(rows.zk);
    {  // Scores of positions [block·8, block·8 + 8) over one slice of the
       // features, two accumulators to halve the chain of dependent products.
      const int block = warp % kPositionBlocks, slice = warp / kPositionBlocks;
      float c[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
      const int position = block * 8 + (lane & 7);
      const int half = ((lane >> 3) & 1) * 8;
      int parity = 0;
      for (int ks = slice; ks < ksteps; ks += kSlices, parity ^= 1) {
        uint32_t qf[4], kf[2];
        const int q_at = (lane & 15) * lay.q_pitch + ks * 16 + (lane >> 4) * 8;
        const int f = ks * 16 + half;
        LoadMatrixX2(kf, f < lay.dim_pad ? k_rows + position * lay.k_pitch + f
                                         : zk_rows + position * lay.zk_pitch +
                                               (f - lay.dim_pad));
        LoadMatrixX4(qf, qa + q_at);
        Mma(c[parity], qf, kf);
        LoadMatrixX4(qf, qa_lo + q_at);
        Mma(c[parity], qf, kf);
      }
      float* out = partial + slice * kRows * T;
      const int col = block * 8 + pair;
      out[row * T + col] = c[0][0] + c[1][0];
      out[row * T + col + 1] = c[0][1] + c[1][1];
      out[(row + 8) * T + col] = c[0][2] + c[1][2];
      out[(row + 8) * T + col + 1] = c[0][3] + c[1][3];
    }
    __syncthreads();
    // Online softmax: warp per head, lane per position.
    for (int h = warp; h < heads; h += kWarps) {
      float x = -INFINITY;
      if (lane < count) {
        x = 0;
#pragma unroll
        for (int s = 0; s < kSlices; ++s)
          x += partial[(s * kRows + h) * T + lane];
        if (a.sigma != nullptr) {
          x *= a.sigma[(b * a.capacity + t + lane) * a.latent_groups + h / g];
        }
      }
      const float e = OnlineSoftmaxStep<true>(x, h, m, l, corr);
      if (lane < T) {
        SplitBf16(e, pm + h * lay.p_pitch + lane,
                  pm_lo + h * lay.p_pitch + lane);
      }
    }
    __syncthreads();
    {  // Values: this warp's column blocks, T/16 products of k = 16 positions.
      uint32_t pf[T / 16][4], pf_lo[T / 16][4];
#pragma unroll
      for (int kk = 0; kk < T / 16; ++kk) {
        const int p_at = (lane & 15) * lay.p_pitch + kk * 16 + (lane >> 4) * 8;
        LoadMatrixX4(pf[kk], pm + p_at);
        LoadMatrixX4(pf_lo[kk], pm_lo + p_at);
      }
      const float lo = corr[row], hi = corr[row + 8];
      const bf16* v_rows = reinterpret_cast<const bf16*>(rows.v);
      const bf16* zv_rows = reinterpret_cast<const bf16*>(rows.zv);
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        const int nb = warp + j * kWarps;
        if (nb >= value_blocks) break;
        acc[j][0] *= lo;
        acc[j][1] *= lo;
        acc[j][2] *= hi;
        acc[j][3] *= hi;
        const int col = nb * 8;
#pragma unroll
        for (int kk = 0; kk < T / 16; ++kk) {
          const int position = kk * 16 + (lane & 15);
          uint32_t vf[2];
          LoadMatrixX2Transposed(vf, col < lay.dim_pad
                                         ? v_rows + position * lay.k_pitch + col
                                         : zv_rows + position * lay.zv_pitch +
                                               (col - lay.dim_pad));
          Mma(acc[j], pf[kk], vf);
          Mma(acc[j], pf_lo[kk], vf);
        }
      }
    }
    __syncthreads();  // the next pass refills this tile's slot and P
  }
  const int64_t item = (group * splits + split) * heads;
  if (threadIdx.x < heads) {
    ws_m[item + threadIdx.x] = m[threadIdx.x] * 0.6931471805599453f;
    ws_l[item + threadIdx.x] = l[threadIdx.x];
  }
#pragma unroll
  for (int j = 0; j < NB; ++j) {
    const int nb = warp + j * kWarps;
    if (nb >= value_blocks) break;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = row + (e >= 2 ? 8 : 0), col = nb * 8 + pair + (e & 1);
      if (h >= heads) continue;
      int out = -1;
      if (col < a.dim) {
        out = col;
      } else if (col >= lay.dim_pad && col - lay.dim_pad < lat) {
        const int le = col - lay.dim_pad;
        if (le / r == h / g) out = a.dim + le - (h / g) * r;
      }
      if (out >= 0) ws_acc[(item + h) * width + out] = acc[j][e];
    }
  }
}

// Value column blocks per warp the kernel is instantiated for.
constexpr int kBlockCounts[] = {2, 4, 8, 12, 16, 24};

int BlocksPerWarp(const SplitArgs& a) {
  const int warps = WarpsFor(a.tile);
  const int needed = (MmaLayout(a).value_blocks() + warps - 1) / warps;
  for (int n : kBlockCounts) {
    if (n >= needed) return n;
  }
  return 0;
}

int MaxSharedBytes() {
  return DeviceAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 48 << 10);
}

template <int T, typename F>
absl::Status WithKernelTile(const SplitArgs& a, F&& f) {
  auto run = [&](auto kernel) {
    RETURN_IF_ERROR(AllowSharedMemory(reinterpret_cast<const void*>(kernel),
                                      MmaLayout(a).total));
    return f(kernel);
  };
  switch (BlocksPerWarp(a)) {
    case 2:
      return run(MmaSplitKernel<2, T>);
    case 4:
      return run(MmaSplitKernel<4, T>);
    case 8:
      return run(MmaSplitKernel<8, T>);
    case 12:
      return run(MmaSplitKernel<12, T>);
    case 16:
      return run(MmaSplitKernel<16, T>);
    case 24:
      return run(MmaSplitKernel<24, T>);
    default:
      return absl::InvalidArgumentError(
          "tensor-core split kernel: too many value columns");
  }
}

// Calls f(kernel) with the instantiation for the arguments (value blocks per
// warp, tile), its shared-memory limit raised to the layout's size.
template <typename F>
absl::Status WithKernel(const SplitArgs& a, F&& f) {
  return a.tile == 32 ? WithKernelTile<32>(a, f) : WithKernelTile<16>(a, f);
}

// Bytes of tiles a block aims to have in flight (at least three tiles): a
// tile's load latency is hidden only behind the computation of the tiles
// before it.
constexpr int kBytesInFlight = 64 << 10;
constexpr int kMaxStages = 8;

// The layout's ring depth for the tile size in `a`: enough tiles for
// kBytesInFlight, as shared memory allows; 0 if not even two fit.
int StagesFor(SplitArgs a) {
  a.stages = 0;
  const MmaLayout fixed(a);
  const int room =
      (MaxSharedBytes() - fixed.total) / std::max(fixed.tile_bytes, 1);
  if (room < 2) return 0;
  const int wanted =
      std::max(3, (kBytesInFlight + fixed.tile_bytes - 1) / fixed.tile_bytes);
  return std::clamp(wanted, 2, std::min(room, kMaxStages));
}

}  // namespace

bool MmaKernelSupports(const SplitArgs& a) {
  SplitArgs small = a;
  small.tile = 16;
  return a.heads <= kRows && BlocksPerWarp(a) > 0 && StagesFor(small) > 0;
}

int64_t PlanMmaSplits(SplitArgs& a, int64_t groups, int multiprocessors) {
  // 32-position tiles where four of them fit (narrow rows: MHA/GQA), which
  // halves the barriers per byte; else 16.
  a.tile = 32;
  if (StagesFor(a) < 4) a.tile = 16;
  a.stages = StagesFor(a);
  const MmaLayout lay(a);
  a.k.pitch = lay.k_pitch / 2;
  a.v.pitch = lay.v_pitch / 2;
  a.zk.pitch = lay.zk_pitch / 2;
  a.zv.pitch = lay.zv_pitch / 2;
  // As many blocks as fit on the SMs at once (by registers and shared memory),
  // and no more: a second, partial wave would cost a whole block's time.
  int per_sm = 1;
  (void)WithKernel(a, [&](auto kernel) {
    per_sm = ResidentBlocks(reinterpret_cast<const void*>(kernel),
                            32 * WarpsFor(a.tile), lay.total);
    return absl::OkStatus();
  });
  return ChunkSplits(a, static_cast<int64_t>(per_sm) * multiprocessors / groups,
                     a.tile);
}

absl::Status LaunchMmaSplits(const SplitArgs& a, int64_t groups, int64_t splits,
                             float* ws_m, float* ws_l, float* ws_acc,
                             cudaStream_t stream) {
  return WithKernel(a, [&](auto kernel) {
    kernel<<<dim3(groups, splits), 32 * WarpsFor(a.tile), MmaLayout(a).total,
             stream>>>(a, ws_m, ws_l, ws_acc);
    return FromCuda(cudaGetLastError(), "tensor-core split kernel");
  });
}

}  // namespace lrkv::kernels::cuda
