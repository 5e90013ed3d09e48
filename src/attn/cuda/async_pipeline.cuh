// Hopper (sm_90a) building blocks for warp-specialized kernels: shared-memory barriers (mbarrier)
// that hand pipeline stages between a producer and consumers, cp.async and TMA completions counted
// on them, bulk asynchronous reductions from shared to global memory, and the per-warpgroup
// register budget (setmaxnreg). Like wgmma.cuh, only the Hopper kernels use these, under
// __CUDA_ARCH_FEAT_SM90_ALL.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace varpack::cuda {

// A shared-memory barrier (8 bytes at `bar`) that completes a phase when `count` arrivals are in;
// the phases alternate parity 0, 1, 0, ...
__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
// Waits until the phase of parity `parity` has completed (acquire: what the arriving threads
// wrote before arriving is visible after it).
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// Arrives on `bar` once every cp.async this thread has issued so far has landed. The barrier's
// count must include this arrival (noinc: it is not added to the expected count).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Adds `bytes` to the transfer count that the barrier's current phase waits for (the bytes that
// tma_load_3d calls completing on it will bring), without arriving.
__device__ __forceinline__ void mbarrier_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// The tensor map's box at coordinates (c0, c1, c2), innermost first, copied by the TMA unit into
// shared memory at `dst` (1024-byte aligned for 128-byte swizzling); its bytes count against
// `bar`'s transfer count when they land. `map` lives in kernel parameter space (__grid_constant__).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap& map, int c0, int c1,
                                            int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// The reverse of tma_load_3d: the tensor map's box at (c0, c1, c2) written from shared memory at
// `src` (1024-byte aligned, in the map's swizzled layout) by the TMA unit, as a bulk group of this
// thread (bulk_commit, bulk_wait_read); elements outside the tensor are not written. The source
// must have been made visible to the async proxy (fence_proxy_async by its writers, then a barrier).
__device__ __forceinline__ void tma_store_3d(const CUtensorMap& map, int c0, int c1, int c2,
                                             uint32_t src) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n"
               ::"l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(src)
               : "memory");
}

// Rows [row, row + Tile's rows) of head `head` of the tensor behind `map` (a head_tile_map with
// Tile's rows per box) into the GmmaTile at `tile`, one TMA copy per 64-column block, completing
// on `bar`. The caller adds Tile::kBytes to the barrier's transfer count.
template <class Tile, int D>
__device__ __forceinline__ void tma_load_gmma_tile(uint32_t tile, const CUtensorMap& map, int head,
                                                   int row, uint32_t bar) {
#pragma unroll
  for (int c = 0; c < D / 64; ++c)
    tma_load_3d(tile + c * Tile::kBlockBytes, map, c * 64, head, row, bar);
}

// global[0 .. bytes/4) += shared[0 .. bytes/4) in fp32, performed by the copy engine while the
// thread goes on. Both addresses 16-byte aligned, bytes a multiple of 16. The shared source must
// have been made visible to the async proxy (fence_proxy_async by its writers, then a barrier).
__device__ __forceinline__ void bulk_reduce_add_f32(float* global, uint32_t shared, int bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(global),
      "r"(shared), "r"(bytes)
      : "memory");
}
// global[0 .. bytes) = shared[0 .. bytes), by the copy engine as a bulk group of this thread; the
// same alignment and visibility rules as bulk_reduce_add_f32.
__device__ __forceinline__ void bulk_store(void* global, uint32_t shared, int bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(global),
               "r"(shared), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed bulk groups have not yet read their
// shared-memory sources (the others' buffers may be refilled, or the block exit: the global side
// completes on its own).
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Waits until at most N of this thread's committed bulk groups are incomplete: the others' writes
// to global memory are done (fence_proxy_async_global then orders them before this thread's
// later ordinary accesses).
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's global-memory accesses through the async proxy (bulk copies and reductions)
// against its ordinary ones, both ways.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Whether a producer warpgroup at producer_registers and the others at consumer_registers fit the
// registers setmaxnreg can move: only the block's own, each thread starting with 65536 / threads
// rounded down to a multiple of 8 (168 at 384 threads: a pool of 64,512, not 64K). An increase
// the pool cannot cover waits forever (DqByProducer's 64 / 224 split hung so, 2026-12-05).
constexpr bool warpgroup_registers_fit(int threads, int producer_registers,
                                       int consumer_registers) {
  const int at_launch = 65536 / threads / 8 * 8;
  return 128 * producer_registers + (threads - 128) * consumer_registers <= threads * at_launch;
}
static_assert(warpgroup_registers_fit(384, 24, 240) && !warpgroup_registers_fit(384, 64, 224) &&
                  !warpgroup_registers_fit(384, 32, 240) && warpgroup_registers_fit(512, 24, 160),
              "384 threads: 64,512 registers to share; 512 threads: 64K");

// Moves registers between warpgroups: a producer gives its share back, consumers take it. All
// threads of a warpgroup execute the same call; the kernel needs __launch_bounds__(threads, 1) so
// that ptxas knows the per-thread count at entry (otherwise it ignores these).
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_down() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_registers_up() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace varpack::cuda
