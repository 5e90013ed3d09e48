// Command tests: run the built `varpack` binary (VARPACK_CLI, set by CMake) and check its exit
// status, its output, and the files it leaves. Every bad input must give exactly one line on
// stderr naming the file and line (or sample) at fault, a non-zero status, and no output file.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "packed_rows.h"
#include "temp_dir.h"
#include "varpack/io.h"

namespace varpack {
namespace {

using testing::cat;
using testing::read_file;
using testing::read_packed_jsonl;
using testing::Result;
using testing::run;
using testing::TempDir;
using testing::write_file;

// Random JSONL: n records with lengths in [0, max_length], some with labels, some blank lines.
std::vector<std::vector<int32_t>> write_random_input(const std::string& path, int n, int max_length,
                                                     uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> samples;
  std::string text;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> ids(rng() % static_cast<uint32_t>(max_length + 1));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % 32000);
    text += "{\"input_ids\": [";
    for (size_t j = 0; j < ids.size(); ++j) {
      if (j > 0) text += ", ";
      text += std::to_string(ids[j]);
    }
    text += "]";
    if (rng() % 3 == 0) {
      text += ", \"labels\": [";
      for (size_t j = 0; j < ids.size(); ++j) {
        if (j > 0) text += ", ";
        text += std::to_string(j % 2 ? ids[j] : -100);
      }
      text += "]";
    }
    text += "}\n";
    if (rng() % 10 == 0) text += "\n";
    samples.push_back(std::move(ids));
  }
  write_file(path, text);
  return samples;
}

TEST(Cli, NoArgumentsRunsTheEmbeddedDefault) {
  TempDir dir;
  const Result r = run({}, dir);
  EXPECT_EQ(r.status, 0) << r.err;
  for (const char* phrase : {"embedded default", "\"report\"", "2000 samples",
                             "first-fit-decreasing (ffd)", "best-fit-decreasing (bfd)",
                             "fixed", "longest", "dynamic", "packed", "varpack pack data.jsonl"}) {
    EXPECT_NE(r.out.find(phrase), std::string::npos) << phrase << "\n" << r.out;
  }
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(dir.listing().empty());  // the default run writes no file
}

TEST(Cli, HelpForEveryCommand) {
  TempDir dir;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"pack", "--help"}, {"stats", "--help"}}) {
    const Result r = run(args, dir);
    EXPECT_EQ(r.status, 0) << args[0];
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  }
  EXPECT_NE(run({"stats", "--help"}, dir).out.find("alpha*n + beta*n^2"), std::string::npos);
  EXPECT_NE(run({"pack", "--help"}, dir).out.find("--overlong"), std::string::npos);
}

TEST(Cli, PackWritesJsonlBinaryAndReport) {
  TempDir dir;
  const auto samples = write_random_input(dir.file("in.jsonl"), 500, 300, 1);
  int64_t tokens = 0;
  for (const auto& s : samples) tokens += static_cast<int64_t>(s.size());

  Result r = run({"pack", "in.jsonl", "--capacity", "1024", "--out", "out.jsonl", "--report",
                  "report.json"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(cat("packed 500 samples (", std::to_string(tokens), " tokens)")), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");  // stderr is not a terminal here: no progress bar
  r = run({"pack", "in.jsonl", "-L", "1024", "-o", "out.bin"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;

  // Every token of every sample exactly once, in the JSONL and in the binary file alike.
  const auto rows = read_packed_jsonl(dir.file("out.jsonl"));
  const PackedFile file(dir.file("out.bin"));
  ASSERT_EQ(file.num_rows(), static_cast<int64_t>(rows.size()));
  std::vector<std::vector<int32_t>> rebuilt(samples.size());
  for (size_t row = 0; row < rows.size(); ++row) {
    const auto& jr = rows[row];
    const auto br = file.row(static_cast<int64_t>(row));
    ASSERT_EQ(std::vector<int32_t>(br.input_ids.begin(), br.input_ids.end()), jr.input_ids);
    ASSERT_EQ(std::vector<int32_t>(br.labels.begin(), br.labels.end()), jr.labels);
    ASSERT_EQ(br.cu_seqlens, jr.cu_seqlens);
    ASSERT_LE(jr.input_ids.size(), 1024u);
    for (size_t p = 0; p < jr.samples.size(); ++p) {
      const auto [sample, offset, length] = jr.samples[p];
      ASSERT_EQ(offset, 0);
      auto& dest = rebuilt[static_cast<size_t>(sample)];
      ASSERT_TRUE(dest.empty()) << "sample " << sample << " placed twice";
      dest.assign(jr.input_ids.begin() + jr.cu_seqlens[p], jr.input_ids.begin() + jr.cu_seqlens[p] + length);
    }
  }
  EXPECT_EQ(rebuilt, samples);

  simdjson::dom::parser parser;
  simdjson::padded_string text;
  ASSERT_FALSE(simdjson::padded_string::load(dir.file("report.json")).get(text));
  simdjson::dom::object report;
  ASSERT_FALSE(parser.parse(text).get_object().get(report));
  for (const char* key : {"samples", "tokens", "rows", "lower_bound_rows", "padding_rate_packed",
                          "padding_rate_unpacked", "truncated_tokens", "skipped_samples",
                          "seconds"}) {
    EXPECT_FALSE(report[key].error()) << key;
  }
  EXPECT_EQ(report["samples"].get_int64().value(), 500);
  EXPECT_EQ(report["tokens"].get_int64().value(), tokens);
  EXPECT_EQ(report["rows"].get_int64().value(), static_cast<int64_t>(rows.size()));
  EXPECT_GE(report["rows"].get_int64().value(), report["lower_bound_rows"].get_int64().value());
  EXPECT_LT(report["padding_rate_packed"].get_double().value(),
            report["padding_rate_unpacked"].get_double().value());
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"in.jsonl", "out.bin", "out.jsonl", "report.json"}));
}

TEST(Cli, SameInputOptionsAndSeedGiveIdenticalFiles) {
  TempDir dir;
  write_random_input(dir.file("in.jsonl"), 300, 200, 2);
  for (const char* algorithm : {"ffd", "bfd", "histogram", "none", "dynamic"}) {
    for (const char* name : {"a.jsonl", "b.jsonl", "a.bin", "b.bin"}) {
      const Result r = run({"pack", "in.jsonl", "-L", "256", "--algorithm", algorithm, "--shuffle",
                            "--seed", "11", "--overlong", "split", "-o", name}, dir);
      ASSERT_EQ(r.status, 0) << r.err;
    }
    EXPECT_EQ(read_file(dir.file("a.jsonl")), read_file(dir.file("b.jsonl"))) << algorithm;
    EXPECT_EQ(read_file(dir.file("a.bin")), read_file(dir.file("b.bin"))) << algorithm;
  }
}

TEST(Cli, CheckVerifiesTheWrittenFile) {
  TempDir dir;
  write_random_input(dir.file("in.jsonl"), 100, 300, 5);
  for (const char* out : {"c.jsonl", "c.bin"}) {
    const Result r = run({"pack", "in.jsonl", "-L", "128", "--overlong", "split", "--check", "-o", out}, dir);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("of ") + out + " matches the input"), std::string::npos) << r.out;
  }
}

TEST(Cli, FormatOptionOverridesTheExtension) {
  TempDir dir;
  write_random_input(dir.file("in.jsonl"), 20, 50, 3);
  ASSERT_EQ(run({"pack", "in.jsonl", "-L", "64", "-o", "x.jsonl", "--format", "bin"}, dir).status, 0);
  ASSERT_EQ(run({"pack", "in.jsonl", "-L", "64", "-o", "y.bin", "--format", "jsonl"}, dir).status, 0);
  EXPECT_EQ(read_file(dir.file("x.jsonl")).substr(0, 8), "VARPACKB");
  EXPECT_EQ(read_file(dir.file("y.bin")).substr(0, 14), "{\"input_ids\":[");
}

TEST(Cli, StatsComparesTheFourStrategies) {
  TempDir dir;
  write_random_input(dir.file("in.jsonl"), 200, 300, 4);
  const Result r = run({"stats", "in.jsonl", "--capacity", "512", "--alpha", "1", "--beta", "0"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* phrase : {"200 samples", "length histogram", "fixed", "longest", "dynamic",
                             "packed", "saving vs fixed", "alpha 1, beta 0"}) {
    EXPECT_NE(r.out.find(phrase), std::string::npos) << phrase << "\n" << r.out;
  }
  // The histogram's counts (the last number of each "  [from, to)" line) add up to the samples.
  int64_t counted = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  [", 0) == 0) counted += std::stoll(line.substr(line.find_last_of(' ') + 1));
  }
  EXPECT_EQ(counted, 200);
  const Result p = run({"stats", "profile:report", "-L", "4096"}, dir);
  EXPECT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.out.find("2000 samples"), std::string::npos) << p.out;
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"in.jsonl"}));
}

TEST(Cli, StatsTakesACalibratedCostModel) {
  TempDir dir;
  write_random_input(dir.file("in.jsonl"), 50, 300, 5);
  write_file(dir.file("cal.json"), R"({"alpha": 2, "beta": 0.5, "overhead": 100, "device": "x"})");
  const Result r = run({"stats", "in.jsonl", "-L", "512", "--cost-model", "cal.json"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("alpha 2, beta 0.5, plus 100 per row"), std::string::npos) << r.out;
  write_file(dir.file("bad.json"), R"({"alpha": 2, "overhead": 1})");
  const Result missing = run({"stats", "in.jsonl", "-L", "512", "--cost-model", "bad.json"}, dir);
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("bad.json: the cost model has no \"beta\""), std::string::npos) << missing.err;
  write_file(dir.file("neg.json"), R"({"alpha": 2, "beta": 1, "overhead": -1})");
  const Result negative = run({"stats", "in.jsonl", "-L", "512", "--cost-model", "neg.json"}, dir);
  EXPECT_EQ(negative.status, 1);
  EXPECT_NE(negative.err.find("neg.json: "), std::string::npos) << negative.err;
  EXPECT_NE(negative.err.find("overhead"), std::string::npos) << negative.err;
}

TEST(Cli, PackAcceptsAProfileAsInput) {
  TempDir dir;
  const Result r = run({"pack", "profile:report", "-L", "4096", "-o", "p.bin"}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  const PackedFile file(dir.file("p.bin"));
  EXPECT_EQ(file.num_samples(), 2000);
  EXPECT_LT(file.num_rows(), 2000 / 4);
}

// One bad input: files to create, the command, what its one stderr line must contain, and its
// exit status (1 bad input, 2 bad usage).
struct BadCase {
  std::string name;
  std::map<std::string, std::string> files;
  std::vector<std::string> args;
  std::vector<std::string> phrases;
  int status = 1;
};

const std::string kGood = "{\"input_ids\": [1, 2, 3]}\n";

std::vector<BadCase> bad_cases() {
  const std::vector<std::string> pack = {"pack", "in.jsonl", "--capacity", "8", "--out", "out.jsonl"};
  auto with = [](std::vector<std::string> args, std::initializer_list<std::string> more) {
    args.insert(args.end(), more);
    return args;
  };
  return {
      {"malformed_json", {{"in.jsonl", kGood + "{\"input_ids\": [1, 2\n"}}, pack,
       {"in.jsonl:2:", "malformed JSON"}},
      {"missing_input_ids", {{"in.jsonl", kGood + "\n{\"tokens\": [1]}\n"}}, pack,
       {"in.jsonl:3:", "no \"input_ids\" field"}},
      {"negative_id", {{"in.jsonl", kGood + "{\"input_ids\": [5, -3]}\n"}}, pack,
       {"in.jsonl:2:", "input_ids[1] is -3", "negative"}},
      {"fractional_id", {{"in.jsonl", kGood + "{\"input_ids\": [2.5]}\n"}}, pack,
       {"in.jsonl:2:", "input_ids[0]", "not an integer"}},
      {"string_id", {{"in.jsonl", kGood + "{\"input_ids\": [\"12\"]}\n"}}, pack,
       {"in.jsonl:2:", "input_ids[0] is a string"}},
      {"labels_wrong_length", {{"in.jsonl", kGood + "{\"input_ids\": [1, 2], \"labels\": [1]}\n"}},
       pack, {"in.jsonl:2:", "labels has 1 values but input_ids has 2"}},
      {"empty_file", {{"in.jsonl", ""}}, pack, {"in.jsonl: no samples", "empty"}},
      {"capacity_zero", {{"in.jsonl", kGood}},
       {"pack", "in.jsonl", "--capacity", "0", "--out", "out.jsonl"},
       {"--capacity", "0 not in range 1 to 2147483647"}, 2},
      {"capacity_negative", {{"in.jsonl", kGood}},
       {"pack", "in.jsonl", "--capacity=-5", "--out", "out.jsonl"}, {"--capacity", "-5 not in range"}, 2},
      {"capacity_beyond_int32", {{"in.jsonl", kGood}},
       {"pack", "in.jsonl", "-L", "3000000000", "--out", "out.jsonl"}, {"--capacity", "3000000000"}, 2},
      {"capacity_beyond_int64", {{"in.jsonl", kGood}},
       {"pack", "in.jsonl", "-L", "99999999999999999999", "--out", "out.jsonl"}, {"--capacity"}, 2},
      {"capacity_not_a_number", {{"in.jsonl", kGood}},
       {"pack", "in.jsonl", "-L", "abc", "--out", "out.jsonl"}, {"--capacity"}, 2},
      {"unknown_overlong", {{"in.jsonl", kGood}}, with(pack, {"--overlong", "drop"}),
       {"--overlong", "drop", "error,truncate,split"}, 2},
      {"batch_size_zero", {{"in.jsonl", kGood}}, with(pack, {"-B", "0"}),
       {"--batch-size", "0 not in range 1"}, 2},
      {"image_token_id_too_large", {{"in.jsonl", kGood}}, with(pack, {"--image-token-id", "2147483648"}),
       {"--image-token-id", "2147483648"}, 2},
      {"stats_zero_cost", {{"in.jsonl", kGood}},
       {"stats", "in.jsonl", "-L", "8", "--alpha", "0", "--beta", "0"}, {"--alpha and --beta"}, 2},
      {"stats_negative_alpha", {{"in.jsonl", kGood}},
       {"stats", "in.jsonl", "-L", "8", "--alpha=-1"}, {"--alpha"}, 2},
      {"calibrate_is_python", {}, {"calibrate", "--model", "m.py:f"}, {"python -m varpack calibrate"}, 2},
      {"unknown_command", {}, {"check", "x.bin"}, {"check"}, 2},
      {"jsonl_duplicate_key", {{"in.jsonl", "{\"input_ids\": [1], \"input_ids\": [2, 3]}\n"}}, pack,
       {"in.jsonl:1:", "\"input_ids\" appears twice"}},
      {"jsonl_duplicate_labels", {{"in.jsonl", "{\"input_ids\": [1], \"labels\": [1], \"labels\": null}\n"}},
       pack, {"in.jsonl:1:", "\"labels\" appears twice"}},
      {"jsonl_only_empty_samples", {{"in.jsonl", "{\"input_ids\": []}\n\n{\"input_ids\": []}\n"}}, pack,
       {"in.jsonl: no tokens", "all 2 record(s)"}},
      {"jsonl_huge_number", {{"in.jsonl", kGood + "{\"input_ids\": [12345678901234567890123]}\n"}}, pack,
       {"in.jsonl:2:", "too large"}},
      {"jsonl_bom_on_a_later_line", {{"in.jsonl", kGood + "\xEF\xBB\xBF{\"input_ids\": [1]}\n"}}, pack,
       {"in.jsonl:2:", "malformed JSON"}},
      {"inspect_not_packed", {{"in.jsonl", kGood}}, {"inspect", "in.jsonl"},
       {"in.jsonl: not a packed file"}},
      {"pack_a_packed_file", {{"p.bin", std::string("VARPACKB") + std::string(200, '\0')}},
       {"pack", "p.bin", "-L", "8", "-o", "out.jsonl"}, {"p.bin: a packed file", "varpack inspect p.bin"}},
      {"missing_path", {}, pack, {"in.jsonl: cannot open", "No such file"}},
      {"directory_as_input", {{"in.jsonl/x", kGood}}, pack, {"in.jsonl: a folder varpack does not read"}},
      {"output_directory_missing", {{"in.jsonl", kGood}},
       {"pack", "in.jsonl", "--capacity", "8", "--out", "nodir/out.jsonl"},
       {"nodir/out.jsonl", "directory 'nodir' does not exist"}, 2},
      {"report_directory_missing", {{"in.jsonl", kGood}}, with(pack, {"--report", "nodir/r.json"}),
       {"nodir/r.json", "does not exist"}, 2},
      {"overlong_sample", {{"in.jsonl", kGood + "{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}\n"}},
       pack, {"in.jsonl:2: sample 1 has 9 tokens", "capacity 8", "--overlong truncate",
              "--overlong split"}},
      {"overlong_sample_of_a_profile", {}, {"pack", "profile:report", "-L", "100", "-o", "p.bin"},
       {"profile:report: sample", "capacity 100", "truncate", "split"}},
      {"unknown_algorithm", {{"in.jsonl", kGood}}, with(pack, {"--algorithm", "fastest"}),
       {"fastest not in", "ffd", "bfd"}, 2},
      {"unknown_format", {{"in.jsonl", kGood}}, with(pack, {"--format", "parquet"}),
       {"parquet not in", "jsonl,bin"}, 2},
      {"missing_capacity", {{"in.jsonl", kGood}}, {"pack", "in.jsonl", "--out", "out.jsonl"},
       {"--capacity", "required"}, 2},
      {"stats_malformed_json", {{"in.jsonl", "{\"input_ids\": [1,]}\n"}},
       {"stats", "in.jsonl", "--capacity", "8"}, {"in.jsonl:1:", "malformed JSON"}},
      {"stats_capacity_zero", {{"in.jsonl", kGood}}, {"stats", "in.jsonl", "--capacity", "0"},
       {"--capacity", "0 not in range"}, 2},
      {"stats_overlong_sample", {{"in.jsonl", "{\"input_ids\": [1, 2, 3]}\n"}},
       {"stats", "in.jsonl", "--capacity", "2", "--overlong", "error"},
       {"in.jsonl:1: sample 0 has 3 tokens", "truncate"}},
      {"unknown_profile", {}, {"pack", "profile:nosuch", "-L", "8", "-o", "out.jsonl"},
       {"nosuch", "report"}},
  };
}

class CliRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(CliRejects, WithOneLineAndNoOutput) {
  const BadCase& c = GetParam();
  TempDir dir;
  std::vector<std::string> before;
  for (const auto& [name, content] : c.files) {
    std::filesystem::create_directories(std::filesystem::path(dir.file(name)).parent_path());
    write_file(dir.file(name), content);
  }
  before = dir.listing();
  const Result r = run(c.args, dir);
  EXPECT_EQ(r.status, c.status) << "status " << r.status << " (-1: killed by a signal): " << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.rfind("varpack: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.back(), '\n');
  for (const auto& phrase : c.phrases) EXPECT_NE(r.err.find(phrase), std::string::npos) << phrase << " not in: " << r.err;
  EXPECT_EQ(dir.listing(), before) << "the command left a file behind";
}

INSTANTIATE_TEST_SUITE_P(BadInputs, CliRejects, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Cli, AnErrorLeavesAnExistingOutputUntouched) {
  TempDir dir;
  write_file(dir.file("in.jsonl"), kGood + "{\"input_ids\": [1, -2]}\n");
  write_file(dir.file("out.bin"), "previous");
  const Result r = run({"pack", "in.jsonl", "-L", "8", "-o", "out.bin"}, dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(read_file(dir.file("out.bin")), "previous");
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"in.jsonl", "out.bin"}));
}

// An unreadable file; root reads everything, so the case only means something for other users.
TEST(Cli, UnreadableInput) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions do not stop reading";
  TempDir dir;
  write_file(dir.file("in.jsonl"), kGood);
  ::chmod(dir.file("in.jsonl").c_str(), 0);
  const Result r = run({"pack", "in.jsonl", "-L", "8", "-o", "out.jsonl"}, dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("in.jsonl: cannot open: Permission denied"), std::string::npos) << r.err;
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"in.jsonl"}));
}

}  // namespace
}  // namespace varpack
