// NVML's total energy counter of the current CUDA device, for the experiments' timings under a
// sustained load: at the H200's power cap (700 W) the clock follows the energy each call takes,
// and varpack's time over cuDNN's there equalled its energy over cuDNN's (bench/results/cuda.md,
// 2026-12-03 13:41 UTC), so a variant is better there only by the energy it saves. NVML is opened
// with dlopen (libnvidia-ml.so.1 comes with the driver), so the experiments need neither NVML's
// headers nor a link flag, and run, without energy, where it is missing.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>

namespace varpack::bench {

class EnergyMeter {
 public:
  EnergyMeter() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    using Init = int (*)();
    using ByBusId = int (*)(const char*, void**);
    const auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    const auto by_bus_id =
        reinterpret_cast<ByBusId>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    const auto energy = reinterpret_cast<Energy>(dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption"));
    // NVML numbers devices its own way: the CUDA device is found by its PCI bus id.
    int device = 0;
    char bus_id[32];
    if (init == nullptr || by_bus_id == nullptr || energy == nullptr || init() != 0 ||
        cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess ||
        by_bus_id(bus_id, &device_) != 0)
      return;
    energy_ = energy;
  }

  bool available() const { return energy_ != nullptr; }

  // Millijoules the device has used since the driver loaded (0 where unavailable).
  uint64_t millijoules() const {
    unsigned long long mj = 0;
    if (energy_ != nullptr && energy_(device_, &mj) != 0) mj = 0;
    return mj;
  }

 private:
  using Energy = int (*)(void*, unsigned long long*);
  Energy energy_ = nullptr;
  void* device_ = nullptr;  // nvmlDevice_t
};

}  // namespace varpack::bench
