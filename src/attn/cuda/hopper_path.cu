// The device queries of hopper_path.h: one per device, cached (they run on every call).
#include "attn/cuda/hopper_path.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "varpack/error.h"

namespace varpack::cuda {
namespace {

bool hopper_device(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
}

// A per-device answer, asked once: 0 = not asked yet.
int cached(std::array<std::atomic<int>, 64>& known, int device, int (*ask)(int)) {
  if (device < 0 || device >= static_cast<int>(known.size())) return ask(device);
  int value = known[device].load(std::memory_order_relaxed);
  if (value == 0) {
    value = ask(device);
    known[device].store(value, std::memory_order_relaxed);
  }
  return value;
}

int current_device() {
  int device = 0;
  const cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess)
    throw Error(std::string("varpack CUDA attention: no current device: ") +
                cudaGetErrorString(err));
  return device;
}

}  // namespace

int multiprocessor_count() {
  static std::array<std::atomic<int>, 64> known{};
  return cached(known, current_device(), [](int device) {
    int sms = 0;
    const cudaError_t err =
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess || sms <= 0)
      throw Error(std::string("varpack CUDA attention: cannot query the multiprocessor count: ") +
                  cudaGetErrorString(err));
    return sms;
  });
}

bool use_hopper_kernels() {
#if defined(VARPACK_SM90A)
  static const bool forced_mma = [] {
    const char* choice = std::getenv("VARPACK_CUDA_KERNELS");
    return choice != nullptr && std::strcmp(choice, "mma") == 0;
  }();
  if (forced_mma) return false;
  static std::array<std::atomic<int>, 64> known{};  // 1: no, 2: yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  return cached(known, device, [](int d) { return hopper_device(d) ? 2 : 1; }) == 2;
#else
  return false;
#endif
}

}  // namespace varpack::cuda
