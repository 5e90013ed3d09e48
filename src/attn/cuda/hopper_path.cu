// use_hopper_kernels(): one device query per device, cached (the check runs on every call).
#include "attn/cuda/hopper_path.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace varpack::cuda {
namespace {

bool hopper_device(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

}  // namespace

bool use_hopper_kernels() {
#if defined(VARPACK_SM90A)
  static const bool forced_mma = [] {
    const char* choice = std::getenv("VARPACK_CUDA_KERNELS");
    return choice != nullptr && std::strcmp(choice, "mma") == 0;
  }();
  if (forced_mma) return false;
  // 0: not asked yet, 1: no, 2: yes.
  static std::array<std::atomic<int>, 64> known{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (device < 0 || device >= static_cast<int>(known.size())) return hopper_device(device);
  int state = known[device].load(std::memory_order_relaxed);
  if (state == 0) {
    state = hopper_device(device) ? 2 : 1;
    known[device].store(state, std::memory_order_relaxed);
  }
  return state == 2;
#else
  return false;
#endif
}

}  // namespace varpack::cuda
