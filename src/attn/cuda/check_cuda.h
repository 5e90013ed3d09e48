// CHECK_CUDA(call): for the standalone programs (test, benchmark, experiments), which have no
// caller to hand an error to: prints file:line, the call and CUDA's message, and exits with
// status 2.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                                  \
  do {                                                                                    \
    const cudaError_t err_ = (call);                                                      \
    if (err_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,           \
                   cudaGetErrorString(err_));                                             \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

// The current device's multiprocessor count (the experiments launch one block on each).
inline int multiprocessor_count() {
  int device = 0, sms = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}
