// `varpack pack` and `varpack stats` on token files: the same samples given as JSONL, as
// DATA.npy + DATA.offsets.npy, and as a Megatron dataset (megatron:PREFIX and PREFIX.bin) must give
// byte-identical packed files and the same statistics; a bad token file fails with one line naming
// it and leaves no output.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cli_run.h"
#include "temp_dir.h"
#include "token_file_writers.h"

namespace varpack {
namespace {

using testing::cat;
using testing::read_file;
using testing::Result;
using testing::run;
using testing::TempDir;
using testing::write_file;
using Samples = std::vector<std::vector<int32_t>>;

// The same random samples (lengths 0..max_length, ids below 50000) in every input form.
Samples write_inputs(const TempDir& dir, int n, int max_length) {
  std::mt19937 rng(11);
  Samples samples(static_cast<size_t>(n));
  std::string jsonl;
  for (auto& s : samples) {
    s.resize(rng() % static_cast<uint32_t>(max_length + 1));
    jsonl += "{\"input_ids\": [";
    for (size_t j = 0; j < s.size(); ++j) {
      s[j] = static_cast<int32_t>(rng() % 50000);
      jsonl += cat(j > 0 ? ", " : "", std::to_string(s[j]));
    }
    jsonl += "]}\n";
  }
  write_file(dir.file("in.jsonl"), jsonl);
  testing::write_npy_samples<uint16_t>(dir.file("tokens.npy"), dir.file("tokens.offsets.npy"), samples);
  testing::write_npy_samples<int32_t>(dir.file("tokens32.npy"), dir.file("tokens32.offsets.npy"), samples);
  testing::write_megatron<uint16_t>(dir.file("corpus"), 8, samples);
  testing::write_megatron<int32_t>(dir.file("corpus32"), 4, samples);
  return samples;
}

TEST(CliTokenFiles, PackGivesTheFilesOfTheSameSamplesFromJsonl) {
  TempDir dir;
  write_inputs(dir, 400, 300);
  for (const std::string ext : {"bin", "jsonl"}) {
    const std::string expected_name = cat("expected.", ext);
    Result r = run({"pack", "in.jsonl", "-L", "512", "--overlong", "split", "-o", expected_name}, dir);
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string expected = read_file(dir.file(expected_name));
    for (const std::string input : {"tokens.npy", "tokens32.npy", "megatron:corpus", "corpus.bin", "corpus32.bin"}) {
      const std::string out = cat("out.", ext);
      r = run({"pack", input, "-L", "512", "--overlong", "split", "--check", "-o", out}, dir);
      ASSERT_EQ(r.status, 0) << input << ": " << r.err;
      EXPECT_NE(r.out.find("packed 400 samples"), std::string::npos) << r.out;
      EXPECT_TRUE(read_file(dir.file(out)) == expected) << input << " packed to ." << ext << " differs from JSONL";
    }
  }
}

TEST(CliTokenFiles, StatsMatchJsonl) {
  TempDir dir;
  write_inputs(dir, 300, 200);
  const Result expected = run({"stats", "in.jsonl", "-L", "256"}, dir);
  ASSERT_EQ(expected.status, 0) << expected.err;
  for (const std::string input : {"tokens.npy", "megatron:corpus"}) {
    Result r = run({"stats", input, "-L", "256"}, dir);
    ASSERT_EQ(r.status, 0) << r.err;
    // Identical apart from the input's name in the first line.
    const auto after_first_line = [](const std::string& s) { return s.substr(s.find('\n')); };
    EXPECT_EQ(after_first_line(r.out), after_first_line(expected.out)) << input;
  }
}

TEST(CliTokenFiles, BadTokenFilesFailWithOneLineNamingTheFile) {
  TempDir dir;
  const Samples samples = write_inputs(dir, 50, 300);
  size_t first_over = 0;  // the first sample longer than 200: the one the error must name
  while (samples[first_over].size() <= 200) ++first_over;
  testing::write_npy(dir.file("bad.npy"), std::vector<int32_t>{1, 2, 3});
  testing::write_npy(dir.file("bad.offsets.npy"), std::vector<int64_t>{0, 2, 1});
  write_file(dir.file("float.idx"), testing::megatron_index(7, {}, {}, {0}));
  write_file(dir.file("float.bin"), "");
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"pack", "bad.npy", "-L", "8", "-o", "o.bin"}, "bad.offsets.npy: offsets are not monotone"},
      {{"stats", "bad.npy", "-L", "8"}, "offsets are not monotone"},
      {{"pack", "megatron:float", "-L", "8", "-o", "o.bin"}, "float.idx: dtype code 7 (float32) is floating point"},
      {{"pack", "missing.npy", "-L", "8", "-o", "o.bin"}, "missing.npy: cannot open"},
      {{"pack", "tokens.npy", "-L", "200", "-o", "o.bin"},
       cat("tokens.npy: sample ", std::to_string(first_over), " has ", std::to_string(samples[first_over].size()),
           " tokens, more than the capacity 200")},
  };
  for (const auto& c : cases) {
    const Result r = run(c.args, dir);
    EXPECT_EQ(r.status, 1) << c.args[1];
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("o.bin")));
  }
}

TEST(CliTokenFiles, HelpNamesTheTokenFileInputs) {
  TempDir dir;
  for (const char* command : {"pack", "stats"}) {
    const Result r = run({command, "--help"}, dir);
    ASSERT_EQ(r.status, 0);
    for (const char* part : {"DATA.offsets.npy", "megatron:PREFIX", "PREFIX.bin"}) {
      EXPECT_NE(r.out.find(part), std::string::npos) << command << " --help lacks " << part;
    }
  }
}

}  // namespace
}  // namespace varpack
