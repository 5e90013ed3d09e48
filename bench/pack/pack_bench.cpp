// Packing benchmark: samples per second of every plan_packing algorithm on generated length
// profiles, with rows above the lower bound ceil(tokens / capacity), and the histogram packer on
// 16M lengths. Single-threaded; median of --repeats runs after one warm-up, each timed by the
// steady clock (wall) and by the thread's CPU clock (what a shared, busy machine cannot inflate).
//
//   pack_bench [--sizes 1000000,10000000] [--profiles report,longtail] [--repeats 3]
//              [--histogram-samples 16000000] [--json]
//   pack_bench --dump-lengths PROFILE N FILE
//
// --dump-lengths writes N lengths of PROFILE (seed 0, as the benchmark uses) as raw int64 for
// the Python peer (python_bfd_peer.py), prints the profile's capacity and exits;
// bench/pack/run_pack_bench.py runs both and prints the ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "varpack/error.h"
#include "varpack/pack.h"
#include "varpack/profiles.h"

namespace {

struct Result {
  std::string profile;
  std::string algorithm;
  int64_t samples;
  int64_t capacity;
  double seconds;             // median wall time of fresh calls (plan_packing: new buffers)
  double cpu_seconds;         // median thread CPU time of the same calls
  double seconds_reused;      // median wall time with buffers reused (plan_packing_into)
  double cpu_seconds_reused;  // median thread CPU time of those
  int64_t rows;
  int64_t lower_bound;
  double padding;
};

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Both clocks started at construction.
struct Clocks {
  std::chrono::steady_clock::time_point wall0 = std::chrono::steady_clock::now();
  double cpu0 = thread_cpu_seconds();
  double wall() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  }
  double cpu() const { return thread_cpu_seconds() - cpu0; }
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

Result measure(const std::string& profile, const std::vector<int64_t>& lengths, int64_t capacity,
               varpack::Algorithm algorithm, int repeats) {
  varpack::PackOptions o;
  o.capacity = capacity;
  o.algorithm = algorithm;
  o.overlong = varpack::OverlongPolicy::split;
  auto median = [](std::vector<double> t) {
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  varpack::PackPlan plan = varpack::plan_packing(lengths, o);  // warm-up, and the stats
  std::vector<double> fresh, fresh_cpu, reused, reused_cpu;
  for (int r = 0; r < repeats; ++r) {
    plan = {};  // free the previous plan first, as a fresh call would find memory
    const Clocks start;
    plan = varpack::plan_packing(lengths, o);
    fresh.push_back(start.wall());
    fresh_cpu.push_back(start.cpu());
  }
  for (int r = 0; r < repeats; ++r) {
    const Clocks start;
    varpack::plan_packing_into(lengths, o, plan);
    reused.push_back(start.wall());
    reused_cpu.push_back(start.cpu());
  }
  return {profile,
          std::string(varpack::to_string(algorithm)),
          static_cast<int64_t>(lengths.size()),
          capacity,
          median(fresh),
          median(fresh_cpu),
          median(reused),
          median(reused_cpu),
          plan.stats.rows,
          plan.stats.lower_bound_rows,
          plan.stats.padding_rate_packed};
}

void print_json(const std::vector<Result>& results) {
  std::printf("[\n");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::printf(
        "  {\"profile\": \"%s\", \"algorithm\": \"%s\", \"samples\": %lld, \"capacity\": %lld, "
        "\"seconds\": %.6f, \"cpu_seconds\": %.6f, \"seconds_reused\": %.6f, "
        "\"cpu_seconds_reused\": %.6f, \"samples_per_second\": %.1f, "
        "\"cpu_samples_per_second\": %.1f, \"rows\": %lld, \"lower_bound_rows\": "
        "%lld, \"padding_rate\": %.6f}%s\n",
        r.profile.c_str(), r.algorithm.c_str(), static_cast<long long>(r.samples),
        static_cast<long long>(r.capacity), r.seconds, r.cpu_seconds, r.seconds_reused,
        r.cpu_seconds_reused, static_cast<double>(r.samples) / r.seconds,
        static_cast<double>(r.samples) / r.cpu_seconds, static_cast<long long>(r.rows), static_cast<long long>(r.lower_bound), r.padding,
        i + 1 < results.size() ? "," : "");
  }
  std::printf("]\n");
}

void print_table(const std::vector<Result>& results) {
  std::printf("%-9s %-9s %10s %9s %10s %10s %10s %10s %14s %10s %10s %9s\n", "profile",
              "algorithm", "samples", "capacity", "s fresh", "cpu fresh", "s reused", "cpu reused",
              "samples/cpu-s", "rows", "above LB", "padding");
  for (const Result& r : results) {
    const double above =
        r.lower_bound > 0 ? 100.0 * static_cast<double>(r.rows - r.lower_bound) / r.lower_bound : 0;
    std::printf("%-9s %-9s %10lld %9lld %10.4f %10.4f %10.4f %10.4f %14.0f %10lld %9.3f%% %8.2f%%\n",
                r.profile.c_str(), r.algorithm.c_str(), static_cast<long long>(r.samples),
                static_cast<long long>(r.capacity), r.seconds, r.cpu_seconds, r.seconds_reused,
                r.cpu_seconds_reused, static_cast<double>(r.samples) / r.cpu_seconds, static_cast<long long>(r.rows), above,
                100.0 * r.padding);
  }
}

int run(int argc, char** argv) {
  std::vector<std::string> sizes = {"1000000", "10000000"};
  std::vector<std::string> profiles = {"report", "longtail"};
  int repeats = 3;
  int64_t histogram_samples = 16000000;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw varpack::Error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--sizes") {
      sizes = split_list(value());
    } else if (arg == "--profiles") {
      profiles = split_list(value());
    } else if (arg == "--repeats") {
      repeats = std::max(1, std::atoi(value().c_str()));
    } else if (arg == "--histogram-samples") {
      histogram_samples = std::atoll(value().c_str());
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--dump-lengths") {
      const std::string profile = value();
      const int64_t samples = std::atoll(value().c_str());
      const std::string path = value();
      const auto lengths = varpack::generate_lengths(profile, samples, 0);
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(lengths.data()),
                static_cast<std::streamsize>(lengths.size() * sizeof(int64_t)));
      if (!out) throw varpack::Error("cannot write " + path);
      std::printf("%lld\n", static_cast<long long>(varpack::find_length_profile(profile).capacity));
      return 0;
    } else {
      throw varpack::Error("unknown argument '" + arg + "'; see the header of pack_bench.cpp");
    }
  }

  const varpack::Algorithm algorithms[] = {varpack::Algorithm::ffd, varpack::Algorithm::bfd,
                                           varpack::Algorithm::histogram, varpack::Algorithm::none,
                                           varpack::Algorithm::dynamic};
  std::vector<Result> results;
  for (const std::string& name : profiles) {
    const varpack::LengthProfile& profile = varpack::find_length_profile(name);
    for (const std::string& size : sizes) {
      const auto lengths = varpack::generate_lengths(name, std::atoll(size.c_str()), 0);
      for (const varpack::Algorithm a : algorithms)
        results.push_back(measure(name, lengths, profile.capacity, a, repeats));
    }
  }
  if (histogram_samples > 0) {
    const auto lengths = varpack::generate_lengths("report", histogram_samples, 0);
    results.push_back(measure("report", lengths, 4096, varpack::Algorithm::histogram, repeats));
  }
  if (json) {
    print_json(results);
  } else {
    print_table(results);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const varpack::Error& e) {
    std::fprintf(stderr, "pack_bench: %s\n", e.what());
    return 1;
  }
}
