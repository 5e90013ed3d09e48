// Failure drills for `varpack pack`: killed with SIGKILL in the middle of writing, out of disk
// (a 1 MiB tmpfs where the test may mount one, and always a file size limit: RLIMIT_FSIZE with
// SIGXFSZ ignored, so the real write path gets EFBIG), and fed truncated or corrupt packed files.
// In every case no output and no temporary file may be left, and a file already at the output
// path must be left as it was.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.h"
#include "temp_dir.h"
#include "token_file_writers.h"
#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

constexpr const char* kPrevious = "a previous output that must survive";

// Starts varpack with `args` in `dir`, stdout and stderr to files beside it, optionally limited to
// writing files of at most `fsize_limit` bytes.
pid_t start(const std::vector<std::string>& args, const TempDir& dir, rlim_t fsize_limit = RLIM_INFINITY) {
  const std::string err = dir.path().string() + ".err";
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (::chdir(dir.path().c_str()) != 0) ::_exit(120);
  const int out_fd = ::open((dir.path().string() + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  if (fsize_limit != RLIM_INFINITY) {
    const rlimit limit{fsize_limit, fsize_limit};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    ::signal(SIGXFSZ, SIG_IGN);  // kept across exec: writes past the limit fail with EFBIG
  }
  std::vector<char*> argv{const_cast<char*>(VARPACK_CLI)};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(VARPACK_CLI, argv.data());
  ::_exit(121);
}

int wait_exit_status(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

std::string stderr_of(const TempDir& dir) { return read_file(dir.path().string() + ".err"); }

// Bytes the process has passed to write(2) and friends so far (/proc/PID/io "wchar"); -1 once gone.
int64_t bytes_written(pid_t pid) {
  std::ifstream io("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  int64_t value = -1;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return -1;
}

// A token file big enough that writing its packed form takes a while: `tokens` zero ids (a sparse
// file: nothing to write here) in samples of 1000.
void write_big_npy(const TempDir& dir, int64_t tokens) {
  const std::string path = dir.file("big.npy");
  testing::write_npy_raw(path, testing::npy_dict("<i4", static_cast<size_t>(tokens)), "");
  const auto header = static_cast<int64_t>(read_file(path).size());
  ASSERT_EQ(::truncate(path.c_str(), header + 4 * tokens), 0);
  std::vector<int64_t> offsets;
  for (int64_t t = 0; t < tokens; t += 1000) offsets.push_back(t);
  offsets.push_back(tokens);
  testing::write_npy(dir.file("big.offsets.npy"), offsets);
}

TEST(FailureDrills, KillDuringPackLeavesNothingAndKeepsThePreviousOutput) {
  TempDir dir;
  write_big_npy(dir, int64_t{32} << 20);  // 128 MiB of tokens: ~400 MiB packed binary, ~1 GB JSONL
  for (const std::string out : {"out.bin", "out.jsonl"}) {
    write_file(dir.file(out), kPrevious);
    const pid_t pid = start({"pack", "big.npy", "-L", "4096", "-o", out}, dir);
    // Kill once 16 MiB of output went out: mid-write, well before the end.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int64_t written = 0;
    while ((written = bytes_written(pid)) >= 0 && written < (int64_t{16} << 20) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ASSERT_GE(written, int64_t{16} << 20) << out << ": the command ended before it could be killed";
    ::kill(pid, SIGKILL);
    ASSERT_EQ(wait_exit_status(pid), -SIGKILL) << out;
    EXPECT_EQ(read_file(dir.file(out)), kPrevious) << out;
    EXPECT_EQ(dir.listing(), (std::vector<std::string>{"big.npy", "big.offsets.npy", out})) << out;
    std::filesystem::remove(dir.file(out));
  }
}

// Packs the report profile (~850k tokens: ~10 MB binary, more as JSONL) into `out` in `dir` and
// expects a one-line error naming the output and the cause, and nothing written.
void expect_disk_full_refused(const TempDir& dir, const std::string& out, rlim_t fsize_limit,
                              const std::string& cause) {
  write_file(dir.file(out), kPrevious);
  const pid_t pid = start({"pack", "profile:report", "-L", "4096", "-o", out}, dir, fsize_limit);
  EXPECT_EQ(wait_exit_status(pid), 1) << out;
  const std::string err = stderr_of(dir);
  EXPECT_NE(err.find("error writing " + out + ": " + cause), std::string::npos) << err;
  EXPECT_NE(err.find("nothing was written to " + out), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(read_file(dir.file(out)), kPrevious);
}

TEST(FailureDrills, FileSizeLimitIsAClearErrorAndLeavesNothing) {
  TempDir dir;
  for (const std::string out : {"out.bin", "out.jsonl"}) {
    // The limit is above the previous file's size, so only the new output runs into it.
    expect_disk_full_refused(dir, out, 1 << 20, std::strerror(EFBIG));
    EXPECT_EQ(dir.listing(), std::vector<std::string>{out});
    std::filesystem::remove(dir.file(out));
  }
}

TEST(FailureDrills, FullFileSystemIsAClearErrorAndLeavesNothing) {
  TempDir dir;
  const std::string mount_point = dir.file("small");
  std::filesystem::create_directory(mount_point);
  if (::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs here (" << std::strerror(errno)
                 << "; needs root or CAP_SYS_ADMIN); the file size limit drill covers the write path";
  }
  for (const std::string out : {"small/out.bin", "small/out.jsonl"}) {
    expect_disk_full_refused(dir, out, RLIM_INFINITY, std::strerror(ENOSPC));
    std::filesystem::remove(dir.file(out));
  }
  EXPECT_TRUE(std::filesystem::is_empty(mount_point));
  ::umount2(mount_point.c_str(), MNT_DETACH);
}

// Every truncation of a packed binary file, and a corrupting byte in every field of its header and
// every table entry, is refused by PackedFile with a message naming the file and what is wrong.
TEST(FailureDrills, TruncatedAndCorruptPackedFilesAreRefusedSayingWhatAndWhere) {
  TempDir dir;
  ASSERT_EQ(testing::run({"pack", "profile:report", "-L", "4096", "-o", "good.bin"}, dir).status, 0);
  const std::string good = read_file(dir.file("good.bin"));
  const PackedFile reference(dir.file("good.bin"));
  const std::string bad = dir.file("bad.bin");
  auto refusal = [&](const std::string& bytes) -> std::string {
    write_file(bad, bytes);
    try {
      PackedFile file(bad);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  for (size_t size = 0; size < good.size(); size += std::max<size_t>(1, size / 3)) {
    const std::string message = refusal(good.substr(0, size));
    ASSERT_EQ(message.rfind(bad + ": ", 0), 0u) << "truncated to " << size << ": " << message;
    EXPECT_TRUE(message.find("truncated") != std::string::npos ||
                message.find("shorter than the header") != std::string::npos) << message;
  }
  // Header fields and an entry of each table: cu_seqlens[1], row_offsets[1], row_pieces[1] and
  // the first piece's length (sections 3-6; their offsets are at 72 + 8 * section). The capacity
  // (16) and a piece's offset inside its sample (only the source can tell) are not checkable.
  std::vector<size_t> spots{0, 8, 12, 24, 32, 40, 48, 56, 64, 72, 80, 128};
  for (int s = 3; s <= 6; ++s) {
    size_t at;
    std::memcpy(&at, good.data() + 72 + 8 * s, 8);
    spots.push_back(at + (s == 6 ? 16 : 8));
  }
  for (const size_t at : spots) {
    std::string corrupt = good;
    corrupt[at] = static_cast<char>(corrupt[at] ^ 0x40);
    const std::string message = refusal(corrupt);
    EXPECT_EQ(message.rfind(bad + ": ", 0), 0u) << "byte " << at << " changed: '" << message << "'";
  }
  EXPECT_GT(reference.num_rows(), 0);
}

}  // namespace
}  // namespace varpack
