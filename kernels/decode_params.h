// Parameters of the decode-step attention kernels (one new query per sequence
// over a cache of `length` positions). Caches are stored in fp32 or bf16, or
// as ggml's Q8_0 / Q4_0 blocks (base/block_quant.h: 32 values and one fp16
// scale in 34 / 18 bytes, every row a whole number of blocks); arithmetic is
// fp32.
#ifndef LRKV_KERNELS_DECODE_PARAMS_H_
#define LRKV_KERNELS_DECODE_PARAMS_H_

#include <cstdint>

// Callable from CUDA device code as well.
#ifdef __CUDACC__
#define LRKV_HOST_DEVICE __host__ __device__
#else
#define LRKV_HOST_DEVICE
#endif

namespace lrkv::kernels {

enum class CacheDType { kF32, kBF16, kQ8_0, kQ4_0 };

// The name a user gives each storage (`--cache-dtype`, every command): "f32",
// "bf16", and ggml's block types "q8" (Q8_0: 8.5 bits a value) and "q4" (Q4_0:
// 4.5 bits).
constexpr const char* CacheDTypeName(CacheDType t) {
  return t == CacheDType::kF32    ? "f32"
         : t == CacheDType::kBF16 ? "bf16"
         : t == CacheDType::kQ8_0 ? "q8"
                                  : "q4";
}
// Every storage, in the order help lists them.
constexpr CacheDType kCacheDTypes[] = {CacheDType::kBF16, CacheDType::kF32,
                                       CacheDType::kQ8_0, CacheDType::kQ4_0};

// Values per block of a block-quantized cache; rows of such a cache hold whole
// blocks, so their widths and offsets are multiples of it.
constexpr int64_t kQuantBlock = 32;

LRKV_HOST_DEVICE constexpr bool IsBlockQuantized(CacheDType t) {
  return t == CacheDType::kQ8_0 || t == CacheDType::kQ4_0;
}
// Bytes per element of the float caches (fp32, bf16); 0 for block types.
LRKV_HOST_DEVICE constexpr int64_t CacheDTypeSize(CacheDType t) {
  return t == CacheDType::kF32 ? 4 : t == CacheDType::kBF16 ? 2 : 0;
}
// Bytes of `elements` values (for block types a multiple of kQuantBlock).
LRKV_HOST_DEVICE constexpr int64_t CacheBytes(CacheDType t, int64_t elements) {
  if (t == CacheDType::kQ8_0) return elements / kQuantBlock * 34;
  if (t == CacheDType::kQ4_0) return elements / kQuantBlock * 18;
  return elements * CacheDTypeSize(t);
}

// Standard MHA/GQA attention. By default K and V caches are [B, H_kv, capacity,
// d_h]: each (sequence, KV head) streams its positions contiguously.
// Position-major caches ([B, capacity, H_kv, d_h], as the decode engines keep
// them) set `position_major`.
struct MhaDecodeParams {
  int64_t batch = 1, heads = 1, kv_heads = 1, head_dim = 0;
  int64_t length = 0;    // positions to attend over
  int64_t capacity = 0;  // positions allocated
  bool position_major = false;

  // Element offset of position t of KV head `kvh` of sequence b.
  LRKV_HOST_DEVICE int64_t Offset(int64_t b, int64_t kvh, int64_t t) const {
    return position_major ? ((b * capacity + t) * kv_heads + kvh) * head_dim
                          : ((b * kv_heads + kvh) * capacity + t) * head_dim;
  }
  CacheDType dtype = CacheDType::kF32;
  const void* k = nullptr;
  const void* v = nullptr;
  // Optional, position-major only: each sequence's cache in its own block, as
  // a batched decode step of separate sequences holds them. Sequence b's keys
  // and values ([its capacity, H_kv, d_h]) start at k_seqs[b] and v_seqs[b]
  // and it attends over lengths[b] positions; `k` and `v` are then unused and
  // `length` is the longest of lengths (capacity at least that).
  const void* const* k_seqs = nullptr;
  const void* const* v_seqs = nullptr;
  const int64_t* lengths = nullptr;
  // [B, H, d_h], rotated; query head h uses KV head h / (H/H_kv).
  const float* q = nullptr;
  float scale = 1;       // usually 1/sqrt(d_h)
  float* out = nullptr;  // [B, H, d_h]

  // Positions sequence b attends over.
  LRKV_HOST_DEVICE int64_t LengthOf(int64_t b) const {
    return lengths != nullptr ? lengths[b] : length;
  }
  // Sequence b's keys (values): Offset(0, kvh, t) elements on is position t
  // of KV head kvh.
  LRKV_HOST_DEVICE const void* KeysOf(int64_t b) const {
    return SequenceBlock(k_seqs, k, b);
  }
  LRKV_HOST_DEVICE const void* ValuesOf(int64_t b) const {
    return SequenceBlock(v_seqs, v, b);
  }

 private:
  LRKV_HOST_DEVICE const void* SequenceBlock(const void* const* seqs,
                                             const void* all, int64_t b) const {
    if (seqs != nullptr) return seqs[b];
    return static_cast<const unsigned char*>(all) +
           CacheBytes(dtype, Offset(b, 0, 0));
  }
};

// How a factored cache places positions within a segment.
enum class CacheLayout {
  // Position t of sequence b starts at data + (b·capacity + t)·stride.
  kRows,
  // Tiles of kCacheTile positions (tile j of sequence b starts where its first
  // position would in kRows, so the footprint is the same) transposed inside
  // the tile so that the fused kernel's vectors are whole 64-byte loads. With
  // P = 4 / element size (2 for bf16, 1 for fp32) elements per 32-bit lane,
  // element c of the tile's i-th position lies at
  //   keys (k, zk):   (c / P)·16·P + i·P + c % P   lanes are positions, a lane
  //                                               holds P adjacent dims
  //   values (v, zv): (i / P)·P·stride + c·P + i % P   lanes are dims, a lane
  //                                               holds P adjacent positions
  // so a key vector is P dims of 16 positions (dotted with the query) and a
  // value vector is 16 dims of P positions (weighted by their probabilities);
  // with bf16 a lane is exactly the pair vdpbf16ps multiplies. Like vLLM's
  // paged caches, keys and values are laid out differently, so a tiled cache
  // cannot serve one segment as both (absorbed MLA keeps kRows). Requires
  // capacity % kCacheTile == 0 and, for bf16, even key strides.
  kTiles,
};
constexpr int64_t kCacheTile = 16;

// Offset, in elements from the segment's start, of element c of position t of
// sequence b: `key` says whether the segment is k/zk (else v/zv) and `per_lane`
// is P above (ignored for kRows).
LRKV_HOST_DEVICE inline int64_t SegmentOffset(CacheLayout layout, bool key,
                                              int64_t per_lane, int64_t stride,
                                              int64_t capacity, int64_t b,
                                              int64_t t, int64_t c) {
  if (layout == CacheLayout::kRows) return (b * capacity + t) * stride + c;
  const int64_t tile = (b * capacity + t / kCacheTile * kCacheTile) * stride;
  const int64_t i = t % kCacheTile;
  return key ? tile + (c / per_lane) * kCacheTile * per_lane + i * per_lane +
                   c % per_lane
             : tile + (i / per_lane) * per_lane * stride + c * per_lane +
                   i % per_lane;
}

// One cached segment: for sequence b and position t its elements start at
// data + (b·capacity + t)·stride (kRows; see CacheLayout for kTiles). Separate
// arrays (stride = width) stream best: each pass of the kernel then reads one
// contiguous run; an interleaved row layout is expressed with a shared base,
// offsets and stride = row length.
struct CacheSegment {
  const void* data = nullptr;
  int64_t stride = 0;
};

// Factored attention over one shared key/value per position plus per-KV-head
// latents (LRKV), or one shared latent read as both key and value (absorbed
// MLA: k and v are the same segment, dim = d_c, rank = 0). Per position the
// LRKV cache holds
//   k_shared (dim), v_shared (dim), z_K (H_kv·rank), z_V (H_kv·rank)
// (dim = d_h; z_K rotated at write time in plane mode). Scores are
//   s_h(t) = scale · σ_{kv(h),t} · (q_h · k_shared,t + q_latent,h ·
//   z_K,kv(h),t)
// and the kernel returns a·V_shared and a·Z_V per head; the caller applies
// B_hⱽ.
struct FactoredDecodeParams {
  int64_t batch = 1, heads = 1, kv_heads = 1;
  int64_t dim = 0;   // d_h (LRKV) or d_c (MLA)
  int64_t rank = 0;  // r; 0 for MLA
  int64_t length = 0, capacity = 0;
  CacheDType dtype = CacheDType::kF32;
  CacheLayout layout = CacheLayout::kRows;
  // bf16 caches: round the queries and the softmax weights to bf16 before
  // they meet the cache (as FlashAttention and FlashMLA do), accumulating in
  // fp32. Off, the tiled kernel keeps them to ~16 mantissa bits (two bf16
  // parts), as exact as fp32 arithmetic on the widened cache; on, it issues
  // half the multiplies. Only the tiled kernel reads it.
  bool bf16_operands = false;
  CacheSegment k, v, zk, zv;  // widths dim, dim, H_kv·rank, H_kv·rank
  const float* sigma =
      nullptr;               // [B, capacity, H_kv] QK-norm scales, or nullptr
  const float* q = nullptr;  // [B, H, dim]
  const float* q_latent = nullptr;  // [B, H, rank]
  float scale = 1;
  // Reconstruct mode (LRKV with RoPE and a general B_h): K latents are raw;
  // each KV head's residual key B_h z_t is rebuilt per position, rotated
  // (adjacent-pair layout) and dotted with the rotated query q: O(rank · dim)
  // per head and position. When up_k_t is set, q_latent is not used.
  const float* up_k_t = nullptr;    // [H_kv, rank, dim]: B_hᵀ
  const float* rope_cos = nullptr;  // [capacity, dim/2]
  const float* rope_sin = nullptr;  // [capacity, dim/2]
  float* out = nullptr;             // [B, H, dim]   a · V_shared
  float* out_latent = nullptr;      // [B, H, rank]  a · Z_V
};

}  // namespace lrkv::kernels

#endif  // LRKV_KERNELS_DECODE_PARAMS_H_
