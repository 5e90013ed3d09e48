// Picks the CPU attention kernels of the best instruction-set level the running CPU supports, or
// the level VARPACK_CPU_ISA names (or the best below it).
#include <cstdlib>
#include <string>

#include "tiling.h"
#include "varpack/error.h"

namespace varpack::cpu {

extern const CpuKernels kKernelsBaseline;
#if defined(__x86_64__)
extern const CpuKernels kKernelsX86_64_v4;
extern const CpuKernels kKernelsX86_64_v3;
#endif

const CpuKernels& cpu_kernels() {
  struct Level {
    const CpuKernels* kernels;
    bool supported;
  };
#if defined(__x86_64__)
  static const Level levels[] = {{&kKernelsX86_64_v4, __builtin_cpu_supports("x86-64-v4") != 0},
                                 {&kKernelsX86_64_v3, __builtin_cpu_supports("x86-64-v3") != 0},
                                 {&kKernelsBaseline, true}};
#else
  static const Level levels[] = {{&kKernelsBaseline, true}};
#endif
  const char* wanted = std::getenv("VARPACK_CPU_ISA");  // read on each call: the tests switch levels
  bool below_wanted = wanted == nullptr || *wanted == '\0';
  for (const Level& level : levels) {
    below_wanted = below_wanted || std::string(wanted) == level.kernels->isa;
    if (below_wanted && level.supported) return *level.kernels;
  }
  std::string known;
  for (const Level& level : levels) known += std::string(known.empty() ? "" : ", ") + level.kernels->isa;
  throw Error("attention: VARPACK_CPU_ISA=" + std::string(wanted) + " is not a known level (" + known +
              "); unset it to use the best one");
}

}  // namespace varpack::cpu
