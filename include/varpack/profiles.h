// Named length profiles: deterministic generators of sample lengths with realistic, sourced
// shapes (sources in src/pack/profiles.cpp), for the command's embedded default, tests and
// benchmarks. Same name, count and seed give the same lengths on every platform.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace varpack {

struct LengthProfile {
  std::string_view name;
  std::string_view description;  // one line: the shape and where its figures come from
  int64_t capacity;              // the row capacity the profile is meant to be packed into
  int64_t default_samples;       // how many samples the profile stands for by default
};

// The profile of the report this project starts from, and the embedded default of `varpack`.
inline constexpr std::string_view kDefaultProfile = "report";

// Every profile, kDefaultProfile first.
std::span<const LengthProfile> length_profiles();

// The profile called `name`; throws varpack::Error listing the valid names if there is none.
const LengthProfile& find_length_profile(std::string_view name);

// `samples` lengths drawn from profile `name` (samples < 0 means its default_samples), all in
// [1, profile capacity]. Throws varpack::Error for an unknown name.
std::vector<int64_t> generate_lengths(std::string_view name, int64_t samples = -1,
                                      uint64_t seed = 0);

}  // namespace varpack
