// CUDA decode-step kernels (see decode_attention_cuda.h). MHA/GQA and the
// factored cache run through one split kernel: a block takes one group of query
// heads (a sequence's KV head for MHA/GQA, a whole sequence for a factored
// cache, whose shared key and value serve every head) over one chunk of
// positions, tile by tile:
//   stage   cp.async copies of the next tile's rows of every segment into the
//           other of two shared buffers (16/8/4-byte copies as the rows'
//           alignment allows), so that its loads fly while this tile computes;
//   scores  warp per position, lanes over the key's elements: each shared-key
//           element is read once for eight heads, each head's latent slice
//           after it, and eight partial sums are reduced across the warp in
//           nine shuffles (a transposing butterfly);
//   softmax warp per head, lanes over the tile's positions (online softmax);
//   values  thread per (value column, chunk of heads), accumulators in shared
//           memory, each shared-value element read once for the chunk.
// A second kernel merges the splits of every (sequence, head).
#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/decode_attention_cuda.h"
#include "kernels/cuda/split_kernel.cuh"
#include "kernels/decode_attention.h"
#include "base/status_macros.h"

namespace lrkv::kernels::cuda {
namespace {

// Shared memory a block aims to stay under, so that three blocks share an SM.
constexpr int64_t kTargetSharedBytes = 72 << 10;
constexpr int kBlocksPerSm = 8;  // splits aim for this many blocks per SM

// Shared memory in 32-bit words: q, q_latent, accumulators, scores, m, l,
// corr (padded to 16 bytes), then two staged tiles.
__host__ __device__ int64_t SharedWords(const SplitArgs& a) {
  const int64_t h = a.heads;
  const int64_t head_words =
      h * a.dim + h * a.rank + h * (a.dim + a.rank) + h * a.tile + 3 * h;
  return (head_words + 3) / 4 * 4 + 2 * TileWords(a);
}

// Sums v[0..7] over the warp's 32 lanes: lane l ends with the sum of
// v[((l >> 4) & 1) · 4 + ((l >> 3) & 1) · 2 + ((l >> 2) & 1)]. Nine
// shuffles instead of forty: each step sends half of what is left to the
// partner lane and keeps the other half.
__device__ __forceinline__ float TransposeReduce8(const float (&v)[8]) {
  const int lane = threadIdx.x & 31;
  const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
  float w[4], x[2];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float send = b4 ? v[j] : v[j + 4];
    w[j] = (b4 ? v[j + 4] : v[j]) + __shfl_xor_sync(0xffffffffu, send, 16);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float send = b3 ? w[j] : w[j + 2];
    x[j] = (b3 ? w[j + 2] : w[j]) + __shfl_xor_sync(0xffffffffu, send, 8);
  }
  float y =
      (b2 ? x[1] : x[0]) + __shfl_xor_sync(0xffffffffu, b2 ? x[0] : x[1], 4);
  y += __shfl_xor_sync(0xffffffffu, y, 2);
  y += __shfl_xor_sync(0xffffffffu, y, 1);
  return y;
}

// Scores of the tile: warp per position, lanes over elements, eight heads at
// a time.
template <typename E>
__device__ void Scores(const SplitArgs& a, const float* q, const float* ql,
                       const TileRows& rows, int count, int64_t b, int64_t t,
                       float* s) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int g = a.heads / a.latent_groups;
  const int k_pitch = a.k.pitch * 4 / sizeof(E);
  const int zk_pitch = a.zk.pitch * 4 / sizeof(E);
  // The head whose full sum this lane holds after TransposeReduce8.
  const int mine =
      ((lane >> 4) & 1) * 4 + ((lane >> 3) & 1) * 2 + ((lane >> 2) & 1);
  for (int i = threadIdx.x >> 5; i < count; i += warps) {
    const E* key = reinterpret_cast<const E*>(rows.k) + i * k_pitch;
    const E* lat = reinterpret_cast<const E*>(rows.zk) + i * zk_pitch;
    for (int h0 = 0; h0 < a.heads; h0 += 8) {
      const int n = min(8, a.heads - h0);
      float part[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) part[j] = 0;
      for (int c = lane; c < a.dim; c += 32) {
        const float x = ToFloat(key[c]);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (j < n) part[j] += q[(h0 + j) * a.dim + c] * x;
        }
      }
      if (a.rank > 0) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (j >= n) continue;
          const E* z = lat + (h0 + j) / g * a.rank;
          const float* qh = ql + (h0 + j) * a.rank;
          for (int c = lane; c < a.rank; c += 32)
            part[j] += qh[c] * ToFloat(z[c]);
        }
      }
      const float dot = TransposeReduce8(part);
      if ((lane & 3) == 0 && mine < n) {
        const int h = h0 + mine;
        float d = dot;
        if (a.sigma != nullptr) {
          d *= a.sigma[(b * a.capacity + t + i) * a.latent_groups + h / g];
        }
        s[h * a.tile + i] = d;
      }
    }
  }
}

// Folds the tile's scores into each head's running max m and sum l, turning
// them into weights and leaving the accumulators' rescale factor in corr.
__device__ void SoftmaxTile(float* s, int tile, int heads, int count, float* m,
                            float* l, float* corr) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int h = threadIdx.x >> 5; h < heads; h += warps) {
    const float x = lane < count ? s[h * tile + lane] : -INFINITY;
    const float e = OnlineSoftmaxStep<false>(x, h, m, l, corr);
    if (lane < count) s[h * tile + lane] = e;
  }
}

// One value column for C heads h0..: acc[(h0+j)·width] ← corr·acc + Σ_i w·x_i.
template <typename E, int C>
__device__ void AccumulateColumn(const float* s, int tile, int count,
                                 const float* corr, const E* column, int pitch,
                                 int h0, float* acc, int width) {
  float a[C];
#pragma unroll
  for (int j = 0; j < C; ++j) a[j] = acc[(h0 + j) * width] * corr[h0 + j];
  for (int i = 0; i < count; ++i) {
    const float x = ToFloat(column[i * pitch]);
#pragma unroll
    for (int j = 0; j < C; ++j) a[j] += s[(h0 + j) * tile + i] * x;
  }
#pragma unroll
  for (int j = 0; j < C; ++j) acc[(h0 + j) * width] = a[j];
}

template <typename E>
__device__ void AccumulateColumnBy(int chunk, const float* s, int tile,
                                   int count, const float* corr,
                                   const E* column, int pitch, int h0,
                                   float* acc, int width) {
  switch (chunk) {
    case 8:
      AccumulateColumn<E, 8>(s, tile, count, corr, column, pitch, h0, acc,
                             width);
      break;
    case 4:
      AccumulateColumn<E, 4>(s, tile, count, corr, column, pitch, h0, acc,
                             width);
      break;
    case 2:
      AccumulateColumn<E, 2>(s, tile, count, corr, column, pitch, h0, acc,
                             width);
      break;
    default:
      AccumulateColumn<E, 1>(s, tile, count, corr, column, pitch, h0, acc,
                             width);
  }
}

template <typename E>
__device__ void Values(const SplitArgs& a, const float* s, const float* corr,
                       const TileRows& rows, int count, float* acc) {
  const uint32_t* v_rows = rows.v;
  const uint32_t* zv_rows = rows.zv;
  const int width = a.dim + a.rank;
  const int v_pitch = a.v.pitch * 4 / sizeof(E);
  const int shared_items = a.heads / a.value_chunk * a.dim;
  for (int item = threadIdx.x; item < shared_items; item += blockDim.x) {
    const int hc = item / a.dim, c = item - hc * a.dim;
    AccumulateColumnBy<E>(a.value_chunk, s, a.tile, count, corr,
                          reinterpret_cast<const E*>(v_rows) + c, v_pitch,
                          hc * a.value_chunk, acc + c, width);
  }
  if (a.rank == 0) return;
  const int g = a.heads / a.latent_groups, lat = a.latent_groups * a.rank;
  const int zv_pitch = a.zv.pitch * 4 / sizeof(E);
  const int latent_items = g / a.latent_chunk * lat;
  for (int item = threadIdx.x; item < latent_items; item += blockDim.x) {
    const int hc = item / lat, e = item - hc * lat;
    const int lg = e / a.rank, c = e - lg * a.rank;
    AccumulateColumnBy<E>(a.latent_chunk, s, a.tile, count, corr,
                          reinterpret_cast<const E*>(zv_rows) + e, zv_pitch,
                          lg * g + hc * a.latent_chunk, acc + a.dim + c, width);
  }
}

// Partial results of (group, split, head) items: running max, sum and
// accumulators (width = dim + rank each).
template <typename E>
__global__ void __launch_bounds__(256, 3)
    SplitKernel(SplitArgs a, float* ws_m, float* ws_l, float* ws_acc) {
  extern __shared__ __align__(16) uint32_t smem[];
  const int heads = a.heads, width = a.dim + a.rank, tile = a.tile;
  const int64_t group = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int64_t b = group / a.groups_per_sequence;
  const int64_t kvh = group % a.groups_per_sequence;
  const int64_t t0 = split * a.chunk;
  const int64_t t1 = min(a.length, t0 + a.chunk);
  float* q = reinterpret_cast<float*>(smem);
  float* ql = q + heads * a.dim;
  float* acc = ql + heads * a.rank;
  float* s = acc + heads * width;
  float* m = s + heads * tile;
  float* l = m + heads;
  float* corr = l + heads;
  uint32_t* tiles = smem + SharedWords(a) - 2 * TileWords(a);
  const int64_t tile_words = TileWords(a);

  const int64_t row0 = b * a.total_heads + kvh * heads;  // first query head
  for (int i = threadIdx.x; i < heads * a.dim; i += blockDim.x) {
    q[i] = a.q[row0 * a.dim + i] * a.scale;
  }
  for (int i = threadIdx.x; i < heads * a.rank; i += blockDim.x) {
    ql[i] = a.q_latent[row0 * a.rank + i] * a.scale;
  }
  for (int i = threadIdx.x; i < heads * width; i += blockDim.x) acc[i] = 0;
  for (int h = threadIdx.x; h < heads; h += blockDim.x) {
    m[h] = -INFINITY;
    l[h] = 0;
    corr[h] = 1;
  }
  auto count_at = [&](int64_t t) {
    return static_cast<int>(min(static_cast<int64_t>(tile), t1 - t));
  };
  StageTile<E>(a, TileRows(a, tiles), b, kvh, t0, count_at(t0));
  __pipeline_commit();
  int buffer = 0;
  for (int64_t t = t0; t < t1; t += tile, buffer ^= 1) {
    // The next tile's copies fly while this one computes (its buffer was
    // last read before the barrier that ended the previous iteration).
    if (t + tile < t1) {
      StageTile<E>(a, TileRows(a, tiles + (buffer ^ 1) * tile_words), b, kvh,
                   t + tile, count_at(t + tile));
    }
    __pipeline_commit();
    __pipeline_wait_prior(1);  // this tile's copies have landed
    __syncthreads();
    const int count = count_at(t);
    const TileRows rows(a, tiles + buffer * tile_words);
    Scores<E>(a, q, ql, rows, count, b, t, s);
    __syncthreads();
    SoftmaxTile(s, tile, heads, count, m, l, corr);
    __syncthreads();
    Values<E>(a, s, corr, rows, count, acc);
    __syncthreads();
  }
  const int64_t item = (group * splits + split) * heads;
  for (int h = threadIdx.x; h < heads; h += blockDim.x) {
    ws_m[item + h] = m[h];
    ws_l[item + h] = l[h];
  }
  for (int i = threadIdx.x; i < heads * width; i += blockDim.x) {
    ws_acc[item * width + i] = acc[i];
  }
}

// Merges the splits of every (group, head) row:
// out = Σ e^{m_s−M} acc_s / Σ e^{m_s−M} l_s. Block (row, column block): the
// splits' weights e^{m_s−M} computed once into shared memory, then a thread
// per column with sixteen splits' loads in flight at a time (a loop of one load
// at a time took 25 µs for a 32-split LRKV step). Columns [0, n) go to out,
// [n, width) to out2; row = group · heads_per_group + head is also the output
// row (b·H + h).
constexpr int kMergeColumns = 64;
__global__ void __launch_bounds__(kMergeColumns)
    MergeKernel(int64_t splits, int64_t width, int64_t n,
                int64_t heads_per_group, const float* ws_m, const float* ws_l,
                const float* ws_acc, float* out, float* out2) {
  __shared__ float weight[kMaxSplits];
  __shared__ float partial[kMergeColumns / 32];
  const int64_t row = blockIdx.x;
  const int64_t group = row / heads_per_group, h = row % heads_per_group;
  const int64_t first =
      group * splits * heads_per_group + h;  // item of split 0
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float mx = -INFINITY;
  for (int64_t s = lane; s < splits; s += 32) {
    mx = fmaxf(mx, ws_m[first + s * heads_per_group]);
  }
  for (int o = 16; o > 0; o >>= 1) {
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  }
  float l = 0;
  for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) {
    const int64_t item = first + s * heads_per_group;
    const float w = ws_l[item] > 0 ? expf(ws_m[item] - mx) : 0.0f;
    weight[s] = w;
    l += w * ws_l[item];
  }
  for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
  if (lane == 0) partial[warp] = l;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < kMergeColumns / 32; ++w) total += partial[w];
  const float inv = total > 0 ? 1.0f / total : 0.0f;
  const int64_t c = blockIdx.y * kMergeColumns + threadIdx.x;
  if (c >= width) return;
  const float* column = ws_acc + first * width + c;
  const int64_t step = heads_per_group * width;  // between splits
  // Sixteen splits' loads in flight at a time.
  float o[16] = {};
  int64_t s = 0;
  for (; s + 16 <= splits; s += 16) {
#pragma unroll
    for (int j = 0; j < 16; ++j) o[j] += weight[s + j] * column[(s + j) * step];
  }
  for (; s < splits; ++s) o[0] += weight[s] * column[s * step];
  float v = 0;
#pragma unroll
  for (int j = 0; j < 16; ++j) v += o[j];
  v *= inv;
  if (c < n) {
    out[row * n + c] = v;
  } else {
    out2[row * (width - n) + (c - n)] = v;
  }
}

// The widest load (16, 8 or 4 bytes; else one bf16 element) that every row
// start and row length of the segment is aligned to.
int VectorBytes(const SegmentArgs& s, int64_t es) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(s.data) |
                        static_cast<uint64_t>(s.batch_offset * es) |
                        static_cast<uint64_t>(s.head_offset * es) |
                        static_cast<uint64_t>(s.stride * es) |
                        static_cast<uint64_t>(s.width * es);
  for (int v : {16, 8, 4}) {
    if (bits % v == 0) return v;
  }
  return es == 2 ? 2 : 4;
}

// Shared rows padded to 16 bytes, the alignment of a 16-byte cp.async. (Warps
// read a row's consecutive elements, or one column for consecutive columns,
// so no pitch makes them collide in a bank.)
int PitchWords(int64_t width, int64_t es) {
  return static_cast<int>((width * es + 15) / 16 * 4);
}

// The largest of 8, 4, 2, 1 that divides n.
int ChunkOf(int64_t n) {
  for (int c : {8, 4, 2}) {
    if (n % c == 0) return c;
  }
  return 1;
}

// Plans the CUDA-core kernel: row pitches, the largest tile under the target
// (else the largest the device allows), head chunks and splits.
absl::StatusOr<int64_t> PlanCoreSplits(SplitArgs& a, int64_t groups, int64_t es,
                                       int64_t sms, const char* what) {
  for (SegmentArgs* s : {&a.k, &a.v, &a.zk, &a.zv}) {
    s->pitch = s->width == 0 ? 0 : PitchWords(s->width, es);
  }
  if (a.shared_kv) a.v.pitch = a.k.pitch;
  a.value_chunk = ChunkOf(a.heads);
  a.latent_chunk = ChunkOf(a.heads / a.latent_groups);
  const int64_t max_shared =
      DeviceAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 48 << 10);
  int tile = 0;
  for (int64_t limit : {kTargetSharedBytes, max_shared}) {
    for (int t = kMaxTile; t >= 1 && tile == 0; t /= 2) {
      a.tile = t;
      if (SharedWords(a) * 4 <= limit) tile = t;
    }
    if (tile > 0) break;
  }
  if (tile == 0) {
    a.tile = 1;
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a group of ", a.heads, " heads of width ",
                     a.dim + a.rank, " needs ", SharedWords(a) * 4,
                     " bytes of shared memory for one "
                     "position; the device allows ",
                     max_shared));
  }
  a.tile = tile;
  // Enough splits for kBlocksPerSm blocks per SM.
  return ChunkSplits(a, (kBlocksPerSm * sms + groups - 1) / groups, tile);
}

absl::Status LaunchCoreSplits(const SplitArgs& a, CacheDType dtype,
                              int64_t groups, int64_t splits, float* ws_m,
                              float* ws_l, float* ws_acc, cudaStream_t stream,
                              const char* what) {
  const size_t shared = SharedWords(a) * 4;
  const int threads = a.heads * (a.dim + a.rank) >= 1024 ? 256 : 128;
  const dim3 grid(groups, splits);
  auto launch = [&](auto kernel) {
    RETURN_IF_ERROR(AllowSharedMemory(reinterpret_cast<const void*>(kernel),
                                      static_cast<int>(shared)));
    kernel<<<grid, threads, shared, stream>>>(a, ws_m, ws_l, ws_acc);
    return FromCuda(cudaGetLastError(), what);
  };
  return dtype == CacheDType::kBF16 ? launch(SplitKernel<__nv_bfloat16>)
                                    : launch(SplitKernel<float>);
}

// Sets the load widths, plans and launches the split kernel for `groups`
// groups (MHA/GQA: the streaming kernel where the shape fits; factored: the
// tensor-core kernel for bf16 caches where it fits, else the streaming LRKV
// kernel; else the CUDA-core kernel), then the merge.
absl::Status Launch(SplitArgs a, CacheDType dtype, int64_t groups, float* out,
                    float* out_latent, DecodeWorkspace* workspace,
                    cudaStream_t stream, const char* what) {
  if (IsBlockQuantized(dtype)) {
    return absl::UnimplementedError(absl::StrCat(
        what,
        ": the CUDA kernels read fp32 and bf16 caches only, not Q8_0 or Q4_0"));
  }
  const int64_t es = CacheDTypeSize(dtype);
  for (SegmentArgs* s : {&a.k, &a.v, &a.zk, &a.zv}) {
    if (s->width > 0) s->vector = VectorBytes(*s, es);
  }
  const int sms = DeviceAttribute(cudaDevAttrMultiProcessorCount, 1);
  enum { kMhaStream, kLrkvStream, kMma, kCore } kernel = kCore;
  // Measured on an H200 at the paper shape: MHA/GQA stream at 80-95 % of
  // the read bandwidth on the streaming kernel (35-39 % on tensor cores); a
  // bf16 LRKV cache takes 0.083 ms on tensor cores against 0.147 streaming
  // (L = 8192, b = 4), an fp32 one 0.112 streaming against 0.296 on the
  // CUDA-core kernel, and 32-head groups 0.70 against 0.87 ms.
  if (MhaStreamKernelSupports(a, dtype)) {
    kernel = kMhaStream;
  } else if (dtype == CacheDType::kBF16 && MmaKernelSupports(a)) {
    kernel = kMma;
  } else if (LrkvStreamKernelSupports(a, dtype)) {
    kernel = kLrkvStream;
  }
  int64_t splits = 0;
  if (kernel == kMhaStream) {
    splits = PlanMhaStreamSplits(a, dtype, groups, sms);
  } else if (kernel == kLrkvStream) {
    splits = PlanLrkvStreamSplits(a, dtype, groups, sms);
  } else if (kernel == kMma) {
    splits = PlanMmaSplits(a, groups, sms);
  } else {
    ASSIGN_OR_RETURN(splits, PlanCoreSplits(a, groups, es, sms, what));
  }
  if (splits > kMaxSplits) {
    return absl::InternalError(
        absl::StrCat(what, ": ", splits, " splits exceed ", kMaxSplits));
  }
  const int64_t width = a.dim + a.rank, items = groups * splits * a.heads;
  DecodeWorkspace local;
  DecodeWorkspace* ws = workspace != nullptr ? workspace : &local;
  RETURN_IF_ERROR(ws->Reserve(sizeof(float) * items * (2 + width)));
  float* ws_m = static_cast<float*>(ws->data());
  float* ws_l = ws_m + items;
  float* ws_acc = ws_l + items;
  if (kernel == kMhaStream) {
    RETURN_IF_ERROR(LaunchMhaStreamSplits(a, dtype, groups, splits, ws_m, ws_l,
                                          ws_acc, stream));
  } else if (kernel == kLrkvStream) {
    RETURN_IF_ERROR(LaunchLrkvStreamSplits(a, dtype, groups, splits, ws_m, ws_l,
                                           ws_acc, stream));
  } else if (kernel == kMma) {
    RETURN_IF_ERROR(
        LaunchMmaSplits(a, groups, splits, ws_m, ws_l, ws_acc, stream));
  } else {
    RETURN_IF_ERROR(LaunchCoreSplits(a, dtype, groups, splits, ws_m, ws_l,
                                     ws_acc, stream, what));
  }
  const dim3 merge_grid(groups * a.heads,
                        (width + kMergeColumns - 1) / kMergeColumns);
  MergeKernel<<<merge_grid, kMergeColumns, 0, stream>>>(
      splits, width, a.dim, a.heads, ws_m, ws_l, ws_acc, out, out_latent);
  RETURN_IF_ERROR(FromCuda(cudaGetLastError(), what));
  if (workspace != nullptr) return absl::OkStatus();
  return FromCuda(cudaStreamSynchronize(stream), what);
}

}  // namespace

absl::Status FromCuda(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

DecodeWorkspace::~DecodeWorkspace() { cudaFree(data_); }

absl::Status DecodeWorkspace::Reserve(size_t bytes) {
  if (bytes <= bytes_) return absl::OkStatus();
  // Calls queued with the old buffer may still be running.
  RETURN_IF_ERROR(FromCuda(cudaDeviceSynchronize(), "decode workspace"));
  cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
  RETURN_IF_ERROR(FromCuda(cudaMalloc(&data_, bytes), "decode workspace"));
  bytes_ = bytes;
  return absl::OkStatus();
}

bool DeviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

absl::StatusOr<DeviceInfo> CurrentDevice() {
  if (!DeviceAvailable()) {
    return absl::FailedPreconditionError("no CUDA device is available");
  }
  int device = 0;
  cudaDeviceProp prop;
  RETURN_IF_ERROR(FromCuda(cudaGetDevice(&device), "cudaGetDevice"));
  RETURN_IF_ERROR(FromCuda(cudaGetDeviceProperties(&prop, device),
                           "cudaGetDeviceProperties"));
  DeviceInfo info;
  info.name = prop.name;
  info.multiprocessors = prop.multiProcessorCount;
  info.compute_capability = prop.major * 10 + prop.minor;
  info.l2_bytes = prop.l2CacheSize;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  return info;
}

absl::Status MhaDecodeCuda(const MhaDecodeParams& p, DecodeWorkspace* workspace,
                           CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateMha(p));
  if (p.k_seqs != nullptr) {
    return absl::InvalidArgumentError(
        "MHA decode: per-sequence caches (k_seqs) are read by the CPU kernels "
        "only");
  }
  SplitArgs a;
  a.groups_per_sequence = static_cast<int>(p.kv_heads);
  a.heads = static_cast<int>(p.heads / p.kv_heads);
  a.total_heads = static_cast<int>(p.heads);
  a.dim = static_cast<int>(p.head_dim);
  a.length = p.length;
  a.capacity = p.capacity;
  const int64_t dh = p.head_dim, cap = p.capacity, hkv = p.kv_heads;
  SegmentArgs seg;
  seg.batch_offset = hkv * cap * dh;
  seg.head_offset = p.position_major ? dh : cap * dh;
  seg.stride = p.position_major ? hkv * dh : dh;
  seg.width = a.dim;
  a.k = a.v = seg;
  a.k.data = static_cast<const unsigned char*>(p.k);
  a.v.data = static_cast<const unsigned char*>(p.v);
  a.q = p.q;
  a.scale = p.scale;
  return Launch(a, p.dtype, p.batch * p.kv_heads, p.out, nullptr, workspace,
                stream, "MHA decode (CUDA)");
}

absl::Status FactoredDecodeCuda(const FactoredDecodeParams& p,
                                DecodeWorkspace* workspace,
                                CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateFactored(p));
  if (p.layout != CacheLayout::kRows) {
    return absl::InvalidArgumentError(
        "factored decode (CUDA): the cache must use the row layout (the tiled "
        "layout is the AVX-512 kernel's)");
  }
  if (p.up_k_t != nullptr) {
    return absl::InvalidArgumentError(
        "factored decode (CUDA): reconstruct mode is CPU-only");
  }
  SplitArgs a;
  a.heads = a.total_heads = static_cast<int>(p.heads);
  a.latent_groups = static_cast<int>(p.kv_heads);
  a.dim = static_cast<int>(p.dim);
  a.rank = static_cast<int>(p.rank);
  a.length = p.length;
  a.capacity = p.capacity;
  auto segment = [&](const CacheSegment& c, int64_t width) {
    SegmentArgs s;
    s.data = static_cast<const unsigned char*>(c.data);
    s.batch_offset = p.capacity * c.stride;
    s.stride = c.stride;
    s.width = static_cast<int>(width);
    return s;
  };
  a.k = segment(p.k, p.dim);
  a.v = segment(p.v, p.dim);
  a.shared_kv = p.k.data == p.v.data && p.k.stride == p.v.stride;
  if (p.rank > 0) {
    a.zk = segment(p.zk, p.kv_heads * p.rank);
    a.zv = segment(p.zv, p.kv_heads * p.rank);
  }
  a.sigma = p.sigma;
  a.q = p.q;
  a.q_latent = p.q_latent;
  a.scale = p.scale;
  return Launch(a, p.dtype, p.batch, p.out, p.out_latent, workspace, stream,
                "factored decode (CUDA)");
}

}  // namespace lrkv::kernels::cuda
