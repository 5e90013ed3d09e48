// Balancing benchmark: on packed plans of the length profiles, the balancer (BalanceMethod::lpt,
// in the plan's order and with --window steps pooled by cost) against its peer in the same run, dealing rows in order (row i of a step -> rank i % ranks, what
// a DistributedSampler over the rows does): mean max/mean rank cost per step and the predicted
// time of the epoch (sum over steps of the slowest rank's cost, default CostModel); then the time
// both take on --timing-rows rows (median of --repeats after a warm-up, wall and thread CPU time).
//
//   balance_bench [--profiles long,report,longtail] [--samples 400000] [--ranks 8] [--k 1,2,4]
//                 [--window 8] [--timing-rows 1000000] [--repeats 5] [--seed 0]
//
// Plans: best-fit-decreasing, rows shuffled with --seed (as training would shuffle them).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include "varpack/balance.h"
#include "varpack/cost_model.h"
#include "varpack/error.h"
#include "varpack/pack.h"
#include "varpack/profiles.h"

namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Row costs of a shuffled best-fit-decreasing plan of `samples` lengths of `profile`.
std::vector<double> plan_row_costs(const std::string& profile, int64_t samples, uint64_t seed) {
  varpack::PackOptions o;
  o.capacity = varpack::find_length_profile(profile).capacity;
  o.algorithm = varpack::Algorithm::bfd;
  o.shuffle_rows = true;
  o.seed = seed;
  const varpack::PackPlan plan = varpack::plan_packing(varpack::generate_lengths(profile, samples, seed), o);
  return varpack::row_costs(plan, varpack::CostModel{});
}

varpack::RankAssignment balance(const std::vector<double>& costs, int64_t ranks, int64_t k,
                                varpack::BalanceMethod method, int64_t window_steps = 1) {
  varpack::BalanceOptions o;
  o.ranks = ranks;
  o.rows_per_rank = k;
  o.method = method;
  o.window_steps = window_steps;
  return varpack::balance_rows(costs, o);
}

void quality(const std::string& profile, const std::vector<double>& costs, int64_t ranks,
             const std::vector<int64_t>& ks, int64_t window) {
  for (const int64_t k : ks) {
    const auto naive = balance(costs, ranks, k, varpack::BalanceMethod::round_robin);
    const auto lpt = balance(costs, ranks, k, varpack::BalanceMethod::lpt);
    const auto win = balance(costs, ranks, k, varpack::BalanceMethod::lpt, window);
    std::printf("| %s | %zu | %lld | %lld | %lld | %.4f | %.4f | %.4f | %.4f | %.2f | %.2f | %.2f | %.2f | %.4f | %.4f |\n",
                profile.c_str(), costs.size(), static_cast<long long>(ranks), static_cast<long long>(k),
                static_cast<long long>(lpt.steps()), naive.stats.mean_imbalance, lpt.stats.mean_imbalance,
                win.stats.mean_imbalance, lpt.stats.max_imbalance, lpt.stats.ideal_step_time, naive.stats.step_time,
                lpt.stats.step_time, win.stats.step_time, naive.stats.step_time / lpt.stats.step_time,
                naive.stats.step_time / win.stats.step_time);
  }
}

void timing(const std::string& profile, const std::vector<double>& costs, int64_t ranks,
            const std::vector<int64_t>& ks, int64_t window, int repeats) {
  for (const int64_t k : ks) {
    struct Variant {
      const char* name;
      varpack::BalanceMethod method;
      int64_t window;
    };
    for (const Variant v : {Variant{"naive", varpack::BalanceMethod::round_robin, 1},
                            Variant{"lpt", varpack::BalanceMethod::lpt, 1},
                            Variant{"lpt+W", varpack::BalanceMethod::lpt, window}}) {
      balance(costs, ranks, k, v.method, v.window);  // warm-up
      std::vector<double> wall, cpu;
      for (int r = 0; r < repeats; ++r) {
        const auto w0 = std::chrono::steady_clock::now();
        const double c0 = thread_cpu_seconds();
        const auto result = balance(costs, ranks, k, v.method, v.window);
        cpu.push_back(thread_cpu_seconds() - c0);
        wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
        if (result.stats.rows != static_cast<int64_t>(costs.size())) std::abort();
      }
      std::printf("| %s | %zu | %lld | %lld | %s | %.4f | %.4f | %.1f |\n", profile.c_str(), costs.size(),
                  static_cast<long long>(ranks), static_cast<long long>(k),
                  v.name, median(wall), median(cpu),
                  static_cast<double>(costs.size()) / median(cpu) / 1e6);
    }
  }
}

int run(int argc, char** argv) {
  std::vector<std::string> profiles = {"long", "report", "longtail"};
  int64_t samples = 400000, ranks = 8, timing_rows = 1000000, window = 8;
  std::vector<int64_t> ks = {1, 2, 4};
  int repeats = 5;
  uint64_t seed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) throw varpack::Error("option " + arg + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--profiles") {
      profiles = split_list(value);
    } else if (arg == "--samples") {
      samples = std::stoll(value);
    } else if (arg == "--ranks") {
      ranks = std::stoll(value);
    } else if (arg == "--k") {
      ks.clear();
      for (const auto& k : split_list(value)) ks.push_back(std::stoll(k));
    } else if (arg == "--window") {
      window = std::stoll(value);
    } else if (arg == "--timing-rows") {
      timing_rows = std::stoll(value);
    } else if (arg == "--repeats") {
      repeats = std::stoi(value);
    } else if (arg == "--seed") {
      seed = std::stoull(value);
    } else {
      throw varpack::Error("unknown option " + arg + "; see the header of bench/balance/balance_bench.cpp");
    }
  }

  std::printf("Balance quality (default CostModel, %lld samples per profile, seed %llu). naive: row i of a "
              "step -> rank i %% ranks (DistributedSampler over rows); lpt: varpack's balancer in the "
              "plan's row order; lpt+W: with window_steps %lld. Imbalance: max / mean rank cost per step, "
              "mean over steps. Step time: sum over steps of the slowest rank's cost (model seconds); "
              "ideal: sum of the mean rank costs.\n\n",
              static_cast<long long>(samples), static_cast<unsigned long long>(seed), static_cast<long long>(window));
  std::printf("| profile | rows | ranks | k | steps | naive imbalance | lpt imbalance | lpt+W imbalance | lpt worst "
              "step | ideal | naive step time | lpt step time | lpt+W step time | naive / lpt | naive / lpt+W |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& p : profiles) quality(p, plan_row_costs(p, samples, seed), ranks, ks, window);

  std::printf("\nBalancer time on %lld rows (median of %d after a warm-up; single thread)\n\n",
              static_cast<long long>(timing_rows), repeats);
  std::printf("| profile | rows | ranks | k | method | wall s | CPU s | M rows / CPU-s |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& p : profiles) {
    // Enough samples for timing_rows rows: plan a first batch, scale by its rows per sample.
    std::vector<double> costs = plan_row_costs(p, samples, seed);
    const auto per_row = static_cast<double>(samples) / static_cast<double>(costs.size());
    costs = plan_row_costs(p, static_cast<int64_t>(per_row * static_cast<double>(timing_rows) * 1.01) + 1, seed);
    costs.resize(std::min(costs.size(), static_cast<size_t>(timing_rows)));
    timing(p, costs, ranks, ks, window, repeats);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "balance_bench: %s\n", e.what());
    return 1;
  }
}
