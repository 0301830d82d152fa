// The C allocator's settings for lrkv's programs.
#ifndef LRKV_BASE_ALLOCATOR_H_
#define LRKV_BASE_ALLOCATOR_H_

namespace lrkv {

// glibc serves an allocation at or above its mmap threshold with a fresh mmap
// and returns it on free, and trims the heap's top once that much is free; by
// default both thresholds start at 128 KiB and follow the largest block freed.
// LibTorch allocates and frees tensors of a few MB at every layer (attention
// scores, activations), so a forward pass faulted the same pages in again and
// again: `lrkv eval` of the TinyStories excerpt spent 611k page faults and
// 7.4 s, a 20 kB calibration line 6.4 s. Fixed thresholds of 32 MiB (mmap) and
// 64 MiB (trim) keep those blocks in the heap for reuse: 28k faults and 3.2 s,
// 2.0 s, at the same peak RSS. Call first thing in main().
void ConfigureAllocator();

}  // namespace lrkv

#endif  // LRKV_BASE_ALLOCATOR_H_
