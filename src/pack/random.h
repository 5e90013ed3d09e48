// A small self-contained PRNG (SplitMix64) and the draws built on it. The planner's row shuffle and
// the length profiles use it instead of <random>'s distributions, whose output differs between
// standard libraries: the same seed must give the same plan with libstdc++, libc++ and MSVC.
#pragma once

#include <cstdint>

namespace varpack::detail {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    // Steele, Lea and Flood, "Fast splittable pseudorandom number generators" (2014): constants
    // as in the paper's reference code; passes BigCrush.
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, bound), bound > 0, without modulo bias: Lemire's multiply-and-reject
  // ("Fast random integer generation in an interval", 2019).
  uint64_t below(uint64_t bound) {
    __uint128_t m = static_cast<__uint128_t>(next()) * bound;
    auto low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<__uint128_t>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform in [0, 1) with 53 random bits: exact in binary, so identical on every platform.
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace varpack::detail
