// Thread settings for LibTorch's intra-op pool. Debian's LibTorch sizes it to the
// physical cores cpuinfo reports, which is 1 on a 2-vCPU machine; we use every
// logical CPU unless OMP_NUM_THREADS or an explicit count says otherwise.
#ifndef LRKV_RUNTIME_THREADS_H_
#define LRKV_RUNTIME_THREADS_H_

namespace lrkv {

// requested > 0: use that many threads; 0: OMP_NUM_THREADS if set, else all CPUs.
// Returns the count in force.
int ConfigureThreads(int requested = 0);

// The intra-op thread count in force.
int ThreadCount();

}  // namespace lrkv

#endif  // LRKV_RUNTIME_THREADS_H_
