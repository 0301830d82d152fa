// What the split kernels share (decode_attention.cu's CUDA-core kernel,
// decode_attention_mma.cu's tensor-core kernel, the streaming kernels of
// mha_stream.cu and lrkv_stream.cu): the description of a group of query heads
// over a cache, and the cp.async staging of a tile's rows into shared memory.
// Included by the .cu files only.
#ifndef LRKV_KERNELS_CUDA_SPLIT_KERNEL_CUH_
#define LRKV_KERNELS_CUDA_SPLIT_KERNEL_CUH_

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/device_facts.cuh"
#include "kernels/decode_params.h"

namespace lrkv::kernels::cuda {

constexpr int kMaxTile =
    32;  // positions per tile: one lane each in the softmax
// Positions a split covers at least: each split writes heads·(dim + rank)
// partial floats that the merge reads back (~4 % of a 64-position LRKV chunk).
constexpr int64_t kMinSplitPositions = 64;
constexpr int64_t kMaxSplits = 1024;  // the merge kernel's shared weights

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// One cached segment as the blocks see it: group (b, kvh) starts at
// data + b·batch_offset + kvh·head_offset elements, positions `stride` apart.
struct SegmentArgs {
  const unsigned char* data = nullptr;
  int64_t batch_offset = 0, head_offset = 0, stride = 0;  // elements
  int width = 0;   // elements per position
  int vector = 4;  // bytes per copy: 16, 8, 4 or 2 (2: synchronous)
  int pitch = 0;   // 32-bit words per row in shared memory (a multiple of 4)
};

struct SplitArgs {
  int groups_per_sequence = 1;  // H_kv for MHA/GQA, 1 for a factored cache
  int heads = 1;                // query heads of a group
  int total_heads = 1;          // H
  int latent_groups = 1;  // factored H_kv: heads/latent_groups share a slice
  int dim = 0, rank = 0;
  int64_t length = 0, capacity = 0;
  SegmentArgs k, v, zk, zv;
  bool shared_kv = false;  // v is k (absorbed MLA): staged once
  const float* sigma = nullptr;
  const float* q = nullptr;
  const float* q_latent = nullptr;
  float scale = 1;
  int tile = kMaxTile;
  int64_t chunk = 0;     // positions per split, a multiple of tile
  int value_chunk = 1;   // heads per thread over the shared value columns
  int latent_chunk = 1;  // heads per thread over the latent value columns
  int stages = 2;        // tensor-core kernel: tiles in the shared-memory ring
};

// The splits of a.length positions when `wanted` are asked for: at least one,
// none shorter than kMinSplitPositions, at most kMaxSplits. Sets a.chunk to the
// split length rounded up to whole `granule`s of positions and returns the
// splits that chunk gives.
inline int64_t ChunkSplits(SplitArgs& a, int64_t wanted, int64_t granule) {
  const int64_t splits = std::clamp<int64_t>(
      wanted, 1,
      std::clamp<int64_t>(a.length / kMinSplitPositions, 1, kMaxSplits));
  const int64_t granules = (a.length + granule - 1) / granule;
  a.chunk = (granules + splits - 1) / splits * granule;
  return (a.length + a.chunk - 1) / a.chunk;
}

// Words of one staged tile: the rows of every segment.
inline __host__ __device__ int64_t TileWords(const SplitArgs& a) {
  return a.tile *
         (a.k.pitch + (a.shared_kv ? 0 : a.v.pitch) + a.zk.pitch + a.zv.pitch);
}

// One V-byte asynchronous copy global → shared (V = 4, 8 or 16), to a 32-bit
// shared address: __pipeline_memcpy_async converted a generic pointer for every
// copy, and the staging loops were 40 % of the tensor-core kernel's
// instructions.
template <int V>
__device__ __forceinline__ void CopyAsync(uint32_t shared, const void* global) {
  if constexpr (V == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared),
                 "l"(global));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(shared),
                 "l"(global), "n"(V));
  }
}

// Queues copies of `count` rows of a segment, starting at position t, into
// shared rows of `pitch` words: V-byte cp.async copies (the host checked that V
// divides every row's start and length), or for V = 2 (bf16 rows of odd
// length) plain element copies. Warps take rows, groups of 8, 16 or 32 lanes a
// row's pieces, with addresses stepped rather than recomputed.
template <int V>
__device__ void StageRowsBy(const unsigned char* src, int64_t stride_bytes,
                            int count, int row_bytes, uint32_t* dst,
                            int pitch) {
  const int per_row = row_bytes / V;
  const int shift = per_row <= 8 ? 3 : per_row <= 16 ? 4 : 5;
  const int lanes = 1 << shift, lane = threadIdx.x & 31;
  const int part0 = lane & (lanes - 1);
  const int rows_per_pass = (blockDim.x >> 5) << (5 - shift);
  int row = ((threadIdx.x >> 5) << (5 - shift)) + (lane >> shift);
  const unsigned char* s_row = src + row * stride_bytes + part0 * V;
  uint32_t d_row = static_cast<uint32_t>(__cvta_generic_to_shared(dst)) +
                   (row * pitch) * 4 + part0 * V;
  for (; row < count; row += rows_per_pass) {
    const unsigned char* s = s_row;
    uint32_t d = d_row;
    for (int part = part0; part < per_row; part += lanes) {
      if constexpr (V == 2) {
        const unsigned short x =
            __ldcs(reinterpret_cast<const unsigned short*>(s));
        asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(d), "h"(x));
      } else {
        CopyAsync<V>(d, s);
      }
      s += lanes * V;
      d += lanes * V;
    }
    s_row += rows_per_pass * stride_bytes;
    d_row += rows_per_pass * pitch * 4;
  }
}

template <typename E>
__device__ void StageRows(const SegmentArgs& s, int64_t b, int64_t kvh,
                          int64_t t, int count, uint32_t* dst) {
  constexpr int es = sizeof(E);
  const unsigned char* src =
      s.data + (b * s.batch_offset + kvh * s.head_offset + t * s.stride) * es;
  const int64_t stride_bytes = s.stride * es;
  const int row_bytes = s.width * es;
  switch (s.vector) {
    case 16:
      StageRowsBy<16>(src, stride_bytes, count, row_bytes, dst, s.pitch);
      break;
    case 8:
      StageRowsBy<8>(src, stride_bytes, count, row_bytes, dst, s.pitch);
      break;
    case 4:
      StageRowsBy<4>(src, stride_bytes, count, row_bytes, dst, s.pitch);
      break;
    default:
      StageRowsBy<2>(src, stride_bytes, count, row_bytes, dst, s.pitch);
  }
}

// One online-softmax step of head h over a tile, by one warp: x is this lane's
// score (-inf where the tile has no position). Folds the tile into the head's
// running max m[h] and sum l[h], leaves the accumulators' rescale factor in
// corr[h] and returns this lane's weight. kBase2: scores are in base 2
// (exp2, cheaper; the caller keeps m in that base).
template <bool kBase2>
__device__ float OnlineSoftmaxStep(float x, int h, float* m, float* l,
                                   float* corr) {
  float mx = x;
  for (int o = 16; o > 0; o >>= 1) {
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  }
  const float old = m[h];
  mx = fmaxf(mx, old);
  auto power = [](float y) { return kBase2 ? exp2f(y) : expf(y); };
  const float e = x == -INFINITY ? 0.0f : power(x - mx);
  float sum = e;
  for (int o = 16; o > 0; o >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  }
  __syncwarp();  // every lane has read m[h]
  if ((threadIdx.x & 31) == 0) {
    const float c = power(old - mx);
    corr[h] = c;
    l[h] = l[h] * c + sum;
    m[h] = mx;
  }
  return e;
}

// Where one staged tile's rows lie.
struct TileRows {
  uint32_t *k, *v, *zk, *zv;
  __device__ TileRows(const SplitArgs& a, uint32_t* base) {
    k = base;
    uint32_t* next = k + a.tile * a.k.pitch;
    v = k;
    if (!a.shared_kv) {
      v = next;
      next += a.tile * a.v.pitch;
    }
    zk = next;
    zv = next + a.tile * a.zk.pitch;
  }
};

template <typename E>
__device__ void StageTile(const SplitArgs& a, const TileRows& rows, int64_t b,
                          int64_t kvh, int64_t t, int count) {
  StageRows<E>(a.k, b, kvh, t, count, rows.k);
  if (!a.shared_kv) StageRows<E>(a.v, b, kvh, t, count, rows.v);
  if (a.rank > 0) {
    StageRows<E>(a.zk, b, kvh, t, count, rows.zk);
    StageRows<E>(a.zv, b, kvh, t, count, rows.zv);
  }
}

// InternalError "what: <CUDA's message>" unless e is cudaSuccess.
absl::Status FromCuda(cudaError_t e, absl::string_view what);

// The tensor-core kernel (decode_attention_mma.cu), for bf16 caches and at
// most 16 query heads per group.
bool MmaKernelSupports(const SplitArgs& a);
// Splits of `length` positions for `groups` groups; fills a.tile, a.stages and
// the row pitches.
int64_t PlanMmaSplits(SplitArgs& a, int64_t groups, int multiprocessors);
// Launches the split kernel: partial results into the workspace as the
// CUDA-core kernel leaves them (m, l, acc per (group, split, head) item).
absl::Status LaunchMmaSplits(const SplitArgs& a, int64_t groups, int64_t splits,
                             float* ws_m, float* ws_l, float* ws_acc,
                             cudaStream_t stream);

// The streaming kernel (mha_stream.cu), for plain MHA/GQA attention of at
// most 4 query heads per KV head over 16-byte-aligned rows.
bool MhaStreamKernelSupports(const SplitArgs& a, CacheDType dtype);
// Splits of `length` positions for `groups` groups; fills a.chunk.
int64_t PlanMhaStreamSplits(SplitArgs& a, CacheDType dtype, int64_t groups,
                            int multiprocessors);
absl::Status LaunchMhaStreamSplits(const SplitArgs& a, CacheDType dtype,
                                   int64_t groups, int64_t splits, float* ws_m,
                                   float* ws_l, float* ws_acc,
                                   cudaStream_t stream);

// The streaming factored kernel (lrkv_stream.cu), for LRKV caches of at most
// 32 heads with 16-byte-aligned shared rows and rank <= 4 lanes' worth.
bool LrkvStreamKernelSupports(const SplitArgs& a, CacheDType dtype);
int64_t PlanLrkvStreamSplits(SplitArgs& a, CacheDType dtype, int64_t groups,
                             int multiprocessors);
absl::Status LaunchLrkvStreamSplits(const SplitArgs& a, CacheDType dtype,
                                    int64_t groups, int64_t splits, float* ws_m,
                                    float* ws_l, float* ws_acc,
                                    cudaStream_t stream);

}  // namespace lrkv::kernels::cuda

#endif  // LRKV_KERNELS_CUDA_SPLIT_KERNEL_CUH_
