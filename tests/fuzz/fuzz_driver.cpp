// varpack_fuzz: a random-mutation fuzzer for varpack's readers, built with gcc and meant to run
// under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/). It takes a target's seed
// corpus (tests/fuzz/corpus/TARGET/), and for each execution copies a random seed, applies a few
// random mutations (bit flips, interesting integers written over header fields, chunk insertion,
// deletion and duplication, truncation, splicing with another seed, JSON tokens for text
// targets), and runs the target. No coverage feedback (gcc has no libFuzzer), so the seeds and
// the integer mutations do the steering. Deterministic: the same --seed gives the same inputs.
//
//   varpack_fuzz TARGET CORPUS_DIR [--runs N] [--seed S] [--work DIR]
//   varpack_fuzz TARGET --replay FILE          run one saved input
//
// The input being run is always in WORK/current-input, so after a sanitizer abort it is the
// reproducer; a failure the targets detect is also saved as WORK/failure-TARGET-RUN.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "fuzz_targets.h"
#include "varpack/error.h"

namespace fs = std::filesystem;
using varpack::fuzz::FuzzFailure;
using varpack::fuzz::Target;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Values at the edges of the readers' checks: sizes, signs, 32- and 64-bit limits.
constexpr uint64_t kInteresting[] = {0, 1, 2, 3, 4, 7, 8, 63, 64, 65, 127, 128, 192, 255, 256,
                                     0x7fff, 0x8000, 0xffff, 0x10000, 0x7fffffff, 0x80000000,
                                     0xffffffff, 0x100000000, 0x7fffffffffffffff,
                                     0x8000000000000000, 0xffffffffffffffff,
                                     static_cast<uint64_t>(-100), static_cast<uint64_t>(-2)};
// Pieces of the text inputs: JSON syntax, the fields, numbers at the readers' limits, NPY dict.
const char* const kTokens[] = {"{", "}", "[", "]", ",", ":", "\"", "\n", "\r\n", " ", "\\", "\\u0000",
                               "\"input_ids\"", "\"labels\"", "\"images\"", "null", "true", "-100",
                               "-1", "0", "2147483647", "2147483648", "-2147483649",
                               "9223372036854775807", "18446744073709551616", "1e5", "1.5", "-0",
                               "[]", "{}", "report", "|"};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t below(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  void mutate(std::string& s, const std::vector<std::string>& corpus, bool text) {
    const size_t rounds = 1 + below(4);
    for (size_t i = 0; i < rounds; ++i) mutate_once(s, corpus, text);
  }

 private:
  void mutate_once(std::string& s, const std::vector<std::string>& corpus, bool text) {
    switch (below(text ? 9 : 8)) {
      case 0:  // flip a bit
        if (!s.empty()) s[below(s.size())] ^= static_cast<char>(1 << below(8));
        break;
      case 1:  // a random byte
        if (!s.empty()) s[below(s.size())] = static_cast<char>(below(256));
        break;
      case 2:
      case 3: {  // an interesting integer over 1, 2, 4 or 8 bytes, often at an aligned offset
        const size_t width = size_t{1} << below(4);
        if (s.size() < width) break;
        size_t at = below(s.size() - width + 1);
        if (below(2) == 0) at -= at % width;
        uint64_t v = kInteresting[below(std::size(kInteresting))];
        if (below(4) == 0) v += below(3) - 1;
        for (size_t b = 0; b < width; ++b) s[at + b] = static_cast<char>((v >> (8 * b)) & 0xff);
        break;
      }
      case 4:  // delete a chunk
        if (!s.empty()) {
          const size_t at = below(s.size());
          s.erase(at, 1 + below(std::min<size_t>(64, s.size() - at)));
        }
        break;
      case 5: {  // duplicate a chunk, or insert random bytes
        const size_t at = below(s.size() + 1);
        if (!s.empty() && below(2) == 0) {
          const size_t from = below(s.size());
          s.insert(at, s.substr(from, 1 + below(64)));
        } else {
          std::string bytes(1 + below(16), '\0');
          for (char& c : bytes) c = static_cast<char>(below(256));
          s.insert(at, bytes);
        }
        break;
      }
      case 6:  // truncate
        s.resize(below(s.size() + 1));
        break;
      case 7: {  // splice: our head, another seed's tail
        const std::string& other = corpus[below(corpus.size())];
        s = s.substr(0, below(s.size() + 1)) + other.substr(below(other.size() + 1));
        break;
      }
      case 8:  // a token of the text formats
        s.insert(below(s.size() + 1), kTokens[below(std::size(kTokens))]);
        break;
    }
    if (s.size() > kMaxInput) s.resize(kMaxInput);
  }

  static constexpr size_t kMaxInput = 1 << 16;
  std::mt19937_64 rng_;
};

const Target* find_target(const std::string& name) {
  for (const Target& t : varpack::fuzz::targets()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// Runs one input; false (after saying why) on a finding the target detected.
bool run_one(const Target& target, const std::string& input, const std::string& work, std::string* why) {
  try {
    target.run(input, work);
  } catch (const varpack::Error&) {
    // A refusal with a message: what a reader must do with a bad input.
  } catch (const FuzzFailure& f) {
    *why = f.what;
    return false;
  } catch (const std::exception& e) {
    *why = std::string("unexpected exception (not varpack::Error): ") + e.what();
    return false;
  }
  return true;
}

int usage() {
  std::fprintf(stderr, "usage: varpack_fuzz TARGET CORPUS_DIR [--runs N] [--seed S] [--work DIR]\n"
                       "       varpack_fuzz TARGET --replay FILE [--work DIR]\ntargets:");
  for (const Target& t : varpack::fuzz::targets()) std::fprintf(stderr, " %.*s", static_cast<int>(t.name.size()), t.name.data());
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const Target* target = find_target(argv[1]);
  if (target == nullptr) return usage();
  std::string corpus_dir, replay;
  uint64_t runs = 10000, seed = 1;
  // Inputs are rewritten on every run: on a disk file system (ext4 flushes a file rewritten by
  // truncation when it is closed) that costs 100 times what it does in memory, so /dev/shm first.
  const fs::path temp = ::access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm") : fs::temp_directory_path();
  fs::path work = temp / ("varpack-fuzz-" + std::string(argv[1]) + "-" + std::to_string(::getpid()));
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--runs" && has_value) runs = std::stoull(argv[++i]);
    else if (arg == "--seed" && has_value) seed = std::stoull(argv[++i]);
    else if (arg == "--work" && has_value) work = argv[++i];
    else if (arg == "--replay" && has_value) replay = argv[++i];
    else if (corpus_dir.empty() && arg[0] != '-') corpus_dir = arg;
    else return usage();
  }
  fs::create_directories(work);
  std::string why;

  if (!replay.empty()) {
    const bool ok = run_one(*target, read_file(replay), work.string(), &why);
    std::printf("%s: %s\n", replay.c_str(), ok ? "ok" : why.c_str());
    return ok ? 0 : 1;
  }

  std::vector<std::string> corpus;
  for (const auto& entry : fs::directory_iterator(corpus_dir)) corpus.push_back(read_file(entry.path()));
  if (corpus.empty()) {
    std::fprintf(stderr, "varpack_fuzz: no seeds in %s\n", corpus_dir.c_str());
    return 2;
  }
  std::sort(corpus.begin(), corpus.end());  // directory order varies; the runs must not

  const auto start = std::chrono::steady_clock::now();
  const fs::path current = work / "current-input";
  Mutator mutator(seed);
  for (uint64_t run = 0; run < runs; ++run) {
    // Every seed as it is first, then mutants.
    std::string input = corpus[run % corpus.size()];
    if (run >= corpus.size()) mutator.mutate(input, corpus, target->text);
    write_file(current, input);
    if (!run_one(*target, input, work.string(), &why)) {
      const fs::path saved = work / ("failure-" + std::string(target->name) + "-" + std::to_string(run));
      write_file(saved, input);
      std::fprintf(stderr, "varpack_fuzz %s: run %llu: %s\n  input saved as %s\n", argv[1],
                   static_cast<unsigned long long>(run), why.c_str(), saved.c_str());
      return 1;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("varpack_fuzz %s: %llu runs from %zu seeds (seed %llu) in %.1f s (%.0f/s): no failure\n",
              argv[1], static_cast<unsigned long long>(runs), corpus.size(),
              static_cast<unsigned long long>(seed), seconds, static_cast<double>(runs) / seconds);
  fs::remove_all(work);
  return 0;
}
