// `varpack` with no arguments: the main job on the embedded default. Packs the report's length
// profile (profiles.h) with first-fit-decreasing, the report's algorithm, and with
// best-fit-decreasing, builds the packed batch, and prints what it did and how to run on your
// own data.
#include <cstdio>
#include <string>

#include "commands.h"
#include "input.h"
#include "varpack/batch.h"
#include "varpack/cost_model.h"
#include "varpack/pack.h"
#include "varpack/profiles.h"

namespace varpack::cli {
namespace {

void print_plan_line(const char* label, const PlanStats& s) {
  std::printf("  %-34s %6lld rows (lower bound %lld, +%lld)  padding %6.2f%%\n", label,
              static_cast<long long>(s.rows), static_cast<long long>(s.lower_bound_rows),
              static_cast<long long>(s.gap_to_lower_bound()), 100 * s.padding_rate_packed);
}

}  // namespace

int run_default() {
  const LengthProfile& profile = find_length_profile(kDefaultProfile);
  const std::string input = "profile:" + std::string(profile.name);
  std::printf("varpack: no arguments given, so running the embedded default: length profile "
              "\"%s\" packed into rows of %lld.\n  %s\n\n",
              std::string(profile.name).c_str(), static_cast<long long>(profile.capacity),
              std::string(profile.description).c_str());

  const TokenStore samples = load_samples(input);
  const std::vector<int64_t> lengths = samples.lengths();
  PackOptions options;
  options.capacity = profile.capacity;
  options.algorithm = Algorithm::ffd;
  const PackPlan ffd = plan_packing(lengths, options);
  options.algorithm = Algorithm::bfd;
  const PackPlan bfd = plan_packing(lengths, options);
  const PackedBatch batch = build_packed_batch(bfd, 0, bfd.rows(), samples);

  std::printf("%lld samples, %lld tokens.\n", static_cast<long long>(ffd.stats.samples),
              static_cast<long long>(ffd.stats.tokens));
  std::printf("  %-34s %6lld rows                        padding %6.2f%%\n",
              "unpacked (one sample per row)", static_cast<long long>(ffd.stats.samples),
              100 * ffd.stats.padding_rate_unpacked);
  print_plan_line("packed, first-fit-decreasing (ffd)", ffd.stats);
  print_plan_line("packed, best-fit-decreasing (bfd)", bfd.stats);
  std::printf("  packed batch (bfd): %zu tokens in %lld sequences, max_seqlen %d, "
              "positions restart per sample\n\n",
              batch.input_ids.size(), static_cast<long long>(batch.num_samples), batch.max_seqlen);
  std::printf("The four strategies under the cost model (packed = ffd, the report's):\n");
  options.algorithm = Algorithm::ffd;
  print_strategy_table(compare_strategies(lengths, options));
  std::printf("\nTo run on your own data (JSONL, one {\"input_ids\": [...]} per line):\n"
              "  varpack stats data.jsonl --capacity %lld\n"
              "  varpack pack data.jsonl --capacity %lld --out packed.bin --report report.json\n"
              "See varpack --help.\n",
              static_cast<long long>(profile.capacity), static_cast<long long>(profile.capacity));
  return 0;
}

}  // namespace varpack::cli
