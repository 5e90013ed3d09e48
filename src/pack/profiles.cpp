// The length profiles (profiles.h): each is a seeded draw from a simple distribution whose
// parameters come from a cited measurement, using the project's own generator (random.h) so the
// lengths do not depend on the standard library.
#include "varpack/profiles.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "random.h"
#include "varpack/error.h"

namespace varpack {
namespace {

enum class Shape { uniform, lognormal };

struct ProfileSpec {
  LengthProfile profile;
  Shape shape;
  // uniform: integers in [low, high]; lognormal: exp(N(log(median), sigma^2)) rounded and clipped
  // to [low, high].
  int64_t low;
  int64_t high;
  double median;
  double sigma;
};

constexpr std::array<ProfileSpec, 4> kProfiles{{
    // The report this project starts from: 2000 samples uniform in [50, 800), rows of 4096
    // (issue 2; the reference training-step measurement, first row: 47.6% padding when padded to
    // the longest sample).
    {{"report", "uniform in [50, 800), rows of 4096: the report's profile", 4096, 2000},
     Shape::uniform, 50, 799, 0, 0},
    // Long documents: uniform 1k..8k into rows of 16384 (the reference training-step measurement,
    // second row: 35.8% padding when padded to the longest sample).
    {{"long", "uniform in [1000, 8000], rows of 16384: long documents", 16384, 1000},
     Shape::uniform, 1000, 8000, 0, 0},
    // Long-tailed lengths: lognormal with median ~1.1k clipped at 32k (the reference measurements, the
    // load-balancing simulation). The anchor gives the median and the clip, not the spread;
    // sigma = 1.0 is our assumption (mean ~1.8k, 1% of samples above 11.3k).
    {{"longtail", "lognormal, median 1100, sigma 1.0, clipped to [1, 32768], rows of 32768",
      32768, 4000},
     Shape::lognormal, 1, 32768, 1100.0, 1.0},
    // Chat fine-tuning (SFT) data: the ShareGPT form of NVIDIA's Llama-Nemotron-Post-Training-
    // Dataset-v1 (Hugging Face dataset MaziyarPanahi/Llama-Nemotron-Post-Training-Dataset-v1-
    // ShareGPT, README "Stats": median 393, mean 528.1, min 14, max 18,718 tokens). A lognormal
    // with that median and mean has sigma = sqrt(2 ln(528.1 / 393)) = 0.77; clipped to the row
    // capacity 4096 (0.12% of draws lie above it).
    {{"sft", "lognormal, median 393, sigma 0.77, clipped to [14, 4096], rows of 4096: chat SFT data",
      4096, 10000},
     Shape::lognormal, 14, 4096, 393.0, 0.77},
}};

std::string valid_names() {
  std::string names;
  for (const ProfileSpec& spec : kProfiles)
    names += (names.empty() ? "" : ", ") + std::string(spec.profile.name);
  return names;
}

const ProfileSpec& find_spec(std::string_view name) {
  for (const ProfileSpec& spec : kProfiles)
    if (spec.profile.name == name) return spec;
  throw Error("unknown length profile '" + std::string(name) + "'; use one of " + valid_names());
}

// A standard normal draw by Box-Muller. log, sqrt and cos are correctly rounded or within an ulp
// in common C libraries; after rounding to whole tokens the lengths agree across platforms.
double standard_normal(detail::SplitMix64& rng) {
  const double u1 = 1.0 - rng.unit();  // (0, 1]: log stays finite
  const double u2 = rng.unit();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

std::span<const LengthProfile> length_profiles() {
  static const std::array<LengthProfile, kProfiles.size()> profiles = [] {
    std::array<LengthProfile, kProfiles.size()> out{};
    for (size_t i = 0; i < kProfiles.size(); ++i) out[i] = kProfiles[i].profile;
    return out;
  }();
  return profiles;
}

const LengthProfile& find_length_profile(std::string_view name) { return find_spec(name).profile; }

std::vector<int64_t> generate_lengths(std::string_view name, int64_t samples, uint64_t seed) {
  const ProfileSpec& spec = find_spec(name);
  if (samples < 0) samples = spec.profile.default_samples;
  detail::SplitMix64 rng(seed);
  std::vector<int64_t> lengths(static_cast<size_t>(samples));
  const double mu = spec.shape == Shape::lognormal ? std::log(spec.median) : 0.0;
  for (int64_t& length : lengths) {
    if (spec.shape == Shape::uniform) {
      length = spec.low + static_cast<int64_t>(rng.below(static_cast<uint64_t>(spec.high - spec.low + 1)));
    } else {
      const double drawn = std::exp(mu + spec.sigma * standard_normal(rng));
      length = std::clamp(static_cast<int64_t>(std::llround(std::min(drawn, 1e15))), spec.low,
                          spec.high);
    }
  }
  return lengths;
}

}  // namespace varpack
