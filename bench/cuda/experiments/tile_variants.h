// The variants that experiments/tile_shapes.cu times: each is a launch of one forward or backward
// shape at one head dim. They are defined a head dim to a file (d128's by direction) so that they
// compile in parallel: all of them in one file took about two minutes of one core, the longest
// step of the experiments' build on the GPU machine, whose device time it spent.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "varpack/attention.h"

namespace varpack::cuda::tuning {

struct Variant {
  std::string name;
  std::function<void(const AttentionBackwardParams&, void*)> run;
  bool forward;
  int d;                 // head dim
  bool softcap = false;  // run with softcap 30 (checked against the first such of its direction)
};

// The persistent forward's work counter (one int32 of device memory, zeroed by each launch; set by
// tile_shapes' main before any variant runs).
extern int* work_counter;

// Each head dim's variants in the order they are timed and printed; the first of each kind
// (direction, softcap) at a head dim is the one the others are checked against.
std::vector<Variant> d128_forward_variants();
std::vector<Variant> d128_backward_variants();
std::vector<Variant> d64_variants();
std::vector<Variant> d256_variants();
std::vector<Variant> d96_variants();

}  // namespace varpack::cuda::tuning
