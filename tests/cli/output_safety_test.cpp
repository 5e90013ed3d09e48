// No file of the user's is ever destroyed: an output that is an input (by name, hard or symbolic
// link, or a companion file such as DATA.offsets.npy or PREFIX.idx) or the other output is
// refused before anything is read; a symbolic link is written through to its target; FIFOs,
// /dev/null and standard output are written as streams and never replaced; "-" reads stdin.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.h"
#include "temp_dir.h"
#include "token_file_writers.h"

namespace varpack {
namespace {

using testing::read_file;
using testing::Result;
using testing::run;
using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

const std::string kInput = "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [4, 5]}\n{\"input_ids\": [6]}\n";

// Every file in `dir` (links as "-> target") with its content: what must not change.
std::map<std::string, std::string> snapshot(const TempDir& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (entry.is_symlink()) {
      files[name] = "-> " + fs::read_symlink(entry.path()).string();
    } else if (entry.is_regular_file()) {
      files[name] = read_file(entry.path().string());
    } else {
      files[name] = "(special)";
    }
  }
  return files;
}

// The command must fail with bad usage, naming both paths, and change nothing in `dir`.
void expect_refused(const std::vector<std::string>& args, const TempDir& dir,
                    const std::string& phrase) {
  const auto before = snapshot(dir);
  const Result r = run(args, dir);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("it is the same file as the " + phrase), std::string::npos) << r.err;
  EXPECT_EQ(snapshot(dir), before);
}

TEST(OutputSafety, OutputIsTheInput) {
  TempDir dir;
  write_file(dir.file("data.jsonl"), kInput);
  expect_refused({"pack", "data.jsonl", "-L", "8", "-o", "data.jsonl"}, dir, "input data.jsonl");
  expect_refused({"pack", "data.jsonl", "-L", "8", "-o", "./data.jsonl"}, dir, "input data.jsonl");
  expect_refused({"pack", "data.jsonl", "-L", "8", "-o", dir.file("data.jsonl")}, dir, "input");
}

TEST(OutputSafety, OutputIsALinkToTheInput) {
  TempDir dir;
  write_file(dir.file("data.jsonl"), kInput);
  fs::create_hard_link(dir.file("data.jsonl"), dir.file("hard.jsonl"));
  fs::create_symlink("data.jsonl", dir.file("soft.jsonl"));
  expect_refused({"pack", "data.jsonl", "-L", "8", "-o", "hard.jsonl"}, dir, "input data.jsonl");
  expect_refused({"pack", "data.jsonl", "-L", "8", "-o", "soft.jsonl"}, dir, "input data.jsonl");
  expect_refused({"pack", "soft.jsonl", "-L", "8", "-o", "data.jsonl"}, dir, "input soft.jsonl");
}

TEST(OutputSafety, OutputIsACompanionFileOfATokenFile) {
  TempDir dir;
  const std::vector<std::vector<int32_t>> samples = {{1, 2, 3}, {4, 5}};
  testing::write_npy_samples<int32_t>(dir.file("tok.npy"), dir.file("tok.offsets.npy"), samples);
  testing::write_megatron<int32_t>(dir.file("mega"), 4, samples);
  expect_refused({"pack", "tok.npy", "-L", "8", "-o", "tok.offsets.npy"}, dir,
                 "companion file of input tok.npy");
  expect_refused({"pack", "tok.npy", "-L", "8", "-o", "x.bin", "--report", "tok.offsets.npy"}, dir,
                 "companion file");
  expect_refused({"pack", "mega.bin", "-L", "8", "-o", "mega.idx"}, dir, "companion file");
  expect_refused({"pack", "megatron:mega", "-L", "8", "-o", "mega.bin"}, dir, "companion file");
}

TEST(OutputSafety, ReportIsTheInputOrTheOutput) {
  TempDir dir;
  write_file(dir.file("data.jsonl"), kInput);
  expect_refused({"pack", "data.jsonl", "-L", "8", "-o", "out.jsonl", "--report", "data.jsonl"}, dir,
                 "input data.jsonl");
  // Neither exists yet: the same new name is still the same file.
  expect_refused({"pack", "data.jsonl", "-L", "8", "-o", "out.jsonl", "--report", "out.jsonl"}, dir,
                 "--out out.jsonl");
  fs::create_symlink("out.jsonl", dir.file("alias.json"));
  expect_refused({"pack", "data.jsonl", "-L", "8", "-o", "out.jsonl", "--report", "alias.json"}, dir,
                 "--out out.jsonl");
}

TEST(OutputSafety, StandardInputRedirectedFromTheOutput) {
  TempDir dir;
  write_file(dir.file("data.jsonl"), kInput);
  const Result r = run({"pack", "-", "-L", "8", "-o", "data.jsonl"}, dir, dir.file("data.jsonl"));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("same file as the input -"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(dir.file("data.jsonl")), kInput);
}

TEST(OutputSafety, ASymbolicLinkIsWrittenThrough) {
  TempDir dir;
  write_file(dir.file("data.jsonl"), kInput);
  ASSERT_EQ(run({"pack", "data.jsonl", "-L", "8", "-o", "plain.jsonl"}, dir).status, 0);
  fs::create_directory(dir.file("store"));
  write_file(dir.file("store/target.jsonl"), "old");
  fs::create_symlink("store/target.jsonl", dir.file("link.jsonl"));
  fs::create_symlink("store/new.jsonl", dir.file("dangling.jsonl"));
  for (const char* out : {"link.jsonl", "dangling.jsonl"}) {
    const Result r = run({"pack", "data.jsonl", "-L", "8", "-o", out}, dir);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(fs::is_symlink(dir.file(out))) << out << " was replaced by a file";
  }
  EXPECT_EQ(read_file(dir.file("store/target.jsonl")), read_file(dir.file("plain.jsonl")));
  EXPECT_EQ(read_file(dir.file("store/new.jsonl")), read_file(dir.file("plain.jsonl")));
  EXPECT_EQ(fs::read_symlink(dir.file("link.jsonl")), "store/target.jsonl");
  // The temporary file went next to the target, and is gone.
  EXPECT_EQ(fs::directory_iterator(dir.file("store")) == fs::directory_iterator(), false);
  for (const auto& entry : fs::directory_iterator(dir.file("store"))) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos);
  }
}

// Reads a FIFO until its writer closes it, on a thread; released() unblocks an open that no
// writer ever answered.
class FifoReader {
 public:
  explicit FifoReader(std::string path) : path_(std::move(path)) {
    thread_ = std::thread([this] {
      const int fd = ::open(path_.c_str(), O_RDONLY);
      char buffer[4096];
      for (ssize_t n; fd >= 0 && (n = ::read(fd, buffer, sizeof(buffer))) > 0;) got_.append(buffer, static_cast<size_t>(n));
      if (fd >= 0) ::close(fd);
    });
  }
  std::string finish() {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);  // releases a reader still waiting
    if (fd >= 0) ::close(fd);
    thread_.join();
    return got_;
  }

 private:
  std::string path_, got_;
  std::thread thread_;
};

TEST(OutputSafety, AFifoIsAStream) {
  TempDir dir;
  write_file(dir.file("data.jsonl"), kInput);
  ASSERT_EQ(run({"pack", "data.jsonl", "-L", "8", "-o", "plain.bin"}, dir).status, 0);
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  FifoReader reader(dir.file("fifo"));
  const Result r = run({"pack", "data.jsonl", "-L", "8", "-o", "fifo", "--format", "bin"}, dir);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(reader.finish(), read_file(dir.file("plain.bin")));
  struct stat st {};
  ASSERT_EQ(::lstat(dir.file("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";

  // A failing run sends nothing: its reader sees the end at once.
  write_file(dir.file("bad.jsonl"), kInput + "{\"input_ids\": [-1]}\n");
  FifoReader second(dir.file("fifo"));
  const Result bad = run({"pack", "bad.jsonl", "-L", "8", "-o", "fifo"}, dir);
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(second.finish(), "");
}

TEST(OutputSafety, DevNullAndStandardOutputAreStreams) {
  TempDir dir;
  write_file(dir.file("data.jsonl"), kInput);
  ASSERT_EQ(run({"pack", "data.jsonl", "-L", "8", "-o", "plain.jsonl"}, dir).status, 0);
  ASSERT_EQ(run({"pack", "data.jsonl", "-L", "8", "-o", "plain.bin"}, dir).status, 0);
  const Result null = run({"pack", "data.jsonl", "-L", "8", "-o", "/dev/null", "--report", "/dev/null"}, dir);
  EXPECT_EQ(null.status, 0) << null.err;
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  for (const char* out : {"-", "/dev/stdout"}) {
    const Result r = run({"pack", "data.jsonl", "-L", "8", "-o", out}, dir);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, read_file(dir.file("plain.jsonl"))) << out;
    EXPECT_NE(r.err.find("packed 3 samples"), std::string::npos) << "the summary goes to stderr";
  }
  const Result bin = run({"pack", "data.jsonl", "-L", "8", "-o", "-", "--format", "bin", "--check"}, dir);
  EXPECT_EQ(bin.status, 0) << bin.err;
  EXPECT_EQ(bin.out, read_file(dir.file("plain.bin")));
  // Both outputs on one pipe (the capture file here) would interleave: refused.
  const Result both = run({"pack", "data.jsonl", "-L", "8", "-o", "-", "--report", "-"}, dir);
  EXPECT_EQ(both.status, 2) << both.err;
}

TEST(OutputSafety, DashReadsStandardInput) {
  TempDir dir;
  write_file(dir.file("data.jsonl"), kInput);
  ASSERT_EQ(run({"pack", "data.jsonl", "-L", "8", "-o", "plain.jsonl"}, dir).status, 0);
  const Result r = run({"pack", "-", "-L", "8", "-o", "piped.jsonl"}, dir, dir.file("data.jsonl"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(dir.file("piped.jsonl")), read_file(dir.file("plain.jsonl")));
  const Result stats = run({"stats", "-", "-L", "8"}, dir, dir.file("data.jsonl"));
  EXPECT_EQ(stats.status, 0) << stats.err;
  EXPECT_NE(stats.out.find("3 samples, 6 tokens"), std::string::npos) << stats.out;
}

TEST(OutputSafety, AReplacedFileKeepsItsPermissions) {
  TempDir dir;
  write_file(dir.file("data.jsonl"), kInput);
  write_file(dir.file("out.jsonl"), "old");
  ::chmod(dir.file("out.jsonl").c_str(), 0640);
  ASSERT_EQ(run({"pack", "data.jsonl", "-L", "8", "-o", "out.jsonl"}, dir).status, 0);
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("out.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

}  // namespace
}  // namespace varpack
