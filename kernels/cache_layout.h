// Conversions of one factored-cache segment between the row and the tiled
// layout (decode_params.h, CacheLayout). Writers that keep rows (tests, the
// engines' torch tensors) tile them with these; the kernel entry point uses
// the reverse where no tiled implementation runs.
#ifndef LRKV_KERNELS_CACHE_LAYOUT_H_
#define LRKV_KERNELS_CACHE_LAYOUT_H_

#include <cstdint>

#include "kernels/decode_params.h"

namespace lrkv::kernels {

// Elements per 32-bit lane of the tiled layout: 2 for bf16, 1 for fp32. Block
// types have no tiled layout (validation refuses one); 1 keeps the row offsets
// that callers compute for them defined.
inline int64_t ElementsPerLane(CacheDType t) {
  const int64_t size = CacheDTypeSize(t);
  return size > 0 ? 4 / size : 1;
}

// The stride a tiled segment of `width` elements needs: keys round up to a
// whole lane (bf16 keys of odd width carry one zero column).
inline int64_t TiledStride(CacheDType t, bool key, int64_t width) {
  const int64_t p = ElementsPerLane(t);
  return key ? (width + p - 1) / p * p : width;
}

// Copies `positions` positions (a whole number of tiles: batch·capacity with
// capacity % kCacheTile == 0) of a segment `width` elements wide from rows
// `row_stride` apart into the tiled layout with stride `tile_stride`, whose
// extra columns are zeroed. `key` selects the key (k, zK) or value (v, zV)
// arrangement.
void RowsToTiles(CacheDType t, bool key, int64_t positions, int64_t width,
                 int64_t row_stride, int64_t tile_stride, const void* rows,
                 void* tiles);

// The reverse: the tiled segment back into rows (padding columns untouched).
void TilesToRows(CacheDType t, bool key, int64_t positions, int64_t width,
                 int64_t tile_stride, int64_t row_stride, const void* tiles,
                 void* rows);

}  // namespace lrkv::kernels

#endif  // LRKV_KERNELS_CACHE_LAYOUT_H_
