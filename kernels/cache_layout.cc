// Row <-> tile conversions of factored-cache segments (see cache_layout.h).
#include "kernels/cache_layout.h"

#include <cstring>

namespace lrkv::kernels {
namespace {

template <typename E>
void Convert(bool to_tiles, bool key, int64_t positions, int64_t width,
             int64_t row_stride, int64_t tile_stride, int64_t per_lane,
             const E* src, E* dst) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < positions; ++t) {
    for (int64_t c = 0; c < tile_stride; ++c) {
      const int64_t tiled = SegmentOffset(CacheLayout::kTiles, key, per_lane,
                                          tile_stride, positions, 0, t, c);
      if (to_tiles) {
        dst[tiled] = c < width ? src[t * row_stride + c] : E{0};
      } else if (c < width) {
        dst[t * row_stride + c] = src[tiled];
      }
    }
  }
}

void Dispatch(bool to_tiles, CacheDType t, bool key, int64_t positions,
              int64_t width, int64_t row_stride, int64_t tile_stride,
              const void* src, void* dst) {
  const int64_t p = ElementsPerLane(t);
  if (t == CacheDType::kF32) {
    Convert(to_tiles, key, positions, width, row_stride, tile_stride, p,
            static_cast<const float*>(src), static_cast<float*>(dst));
  } else {
    Convert(to_tiles, key, positions, width, row_stride, tile_stride, p,
            static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst));
  }
}

}  // namespace

void RowsToTiles(CacheDType t, bool key, int64_t positions, int64_t width,
                 int64_t row_stride, int64_t tile_stride, const void* rows,
                 void* tiles) {
  Dispatch(true, t, key, positions, width, row_stride, tile_stride, rows,
           tiles);
}

void TilesToRows(CacheDType t, bool key, int64_t positions, int64_t width,
                 int64_t tile_stride, int64_t row_stride, const void* tiles,
                 void* rows) {
  Dispatch(false, t, key, positions, width, row_stride, tile_stride, tiles,
           rows);
}

}  // namespace lrkv::kernels
