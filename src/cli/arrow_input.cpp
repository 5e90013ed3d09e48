// Arrow inputs through the Python reader (see arrow_input.h).
#include "arrow_input.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

#include "varpack/error.h"

extern char** environ;

namespace varpack::cli {
namespace {

namespace fs = std::filesystem;

struct Magic {
  std::string_view bytes, what, todo;
};
constexpr std::array kCompressed = {
    Magic{"\x1f\x8b", "gzip-compressed", "gunzip -k FILE"},
    Magic{"\x28\xb5\x2f\xfd", "zstd-compressed", "zstd -d FILE"},
    Magic{"BZh", "bzip2-compressed", "bunzip2 -k FILE"},
    Magic{std::string_view("\xfd" "7zXZ\0", 6), "xz-compressed", "unxz -k FILE"},
    Magic{"PK\x03\x04", "a zip archive", "unzip FILE"},
};
constexpr std::array<std::string_view, 5> kArrowSuffixes = {".parquet", ".pq", ".arrow", ".feather", ".ipc"};

std::string first_bytes(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string head(n, '\0');
  in.read(head.data(), static_cast<std::streamsize>(n));
  head.resize(static_cast<size_t>(in.gcount()));
  return head;
}

// A temporary folder, removed with everything in it when it goes.
class TempFolder {
 public:
  TempFolder() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/varpack-arrow-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw Error("cannot make a temporary folder from " + pattern + ": " + std::strerror(errno) +
                  " (set TMPDIR to a writable folder)");
    }
    path_ = pattern;
  }
  ~TempFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string python() {
  const char* chosen = std::getenv("VARPACK_PYTHON");
  return chosen && *chosen ? chosen : VARPACK_DEFAULT_PYTHON;
}

// Runs `argv` with stderr captured; returns its exit status (-1 if killed) and that text.
std::pair<int, std::string> run_capturing_stderr(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    throw Error("cannot run " + argv[0] + " (" + std::strerror(spawned) + "): reading Parquet and " +
                "Arrow files needs Python with pyarrow; run scripts/setup.sh (it makes .venv) or set " +
                "VARPACK_PYTHON to a python that has pyarrow");
  }
  std::string err;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) err.append(buffer, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, err};
}

}  // namespace

bool is_arrow_input(const std::string& input) {
  std::error_code ec;
  if (fs::is_directory(input, ec)) return true;
  const std::string head = first_bytes(input, 8);
  for (const auto& m : kCompressed) {
    if (std::string_view(head).starts_with(m.bytes)) {
      throw Error(input + ": " + std::string(m.what) + "; varpack reads uncompressed input: " +
                  "decompress it first (" + std::string(m.todo) + ")");
    }
  }
  for (const auto suffix : kArrowSuffixes) {
    if (input.ends_with(suffix)) return true;
  }
  // Parquet files start "PAR1", Arrow IPC files "ARROW1", Arrow streams (datasets' cache) 0xFFFFFFFF.
  return head.starts_with("PAR1") || head.starts_with("ARROW1") || head.starts_with("\xff\xff\xff\xff");
}

TokenFile open_arrow_input(const std::string& input, const std::string& column) {
  const TempFolder folder;
  const auto [status, message] = run_capturing_stderr(
      {python(), "-I", VARPACK_ARROW_HELPER, "to-npy", input, folder.path(), "--column", column});
  if (status == 1 && !message.empty() && message.find("Traceback") == std::string::npos) {
    throw Error(message);  // the reader's own message: file, column, row
  }
  if (status != 0) {
    throw Error(input + ": the Arrow reader (" + python() + " " + VARPACK_ARROW_HELPER + ") failed" +
                (message.empty() ? "" : ":\n" + message) +
                "\nreading Parquet and Arrow files needs Python with pyarrow: run scripts/setup.sh " +
                "or set VARPACK_PYTHON to a python that has pyarrow");
  }
  // Mapped, the files may go: `folder` removes them on return, before any output is written.
  return read_npy_tokens(folder.path() + "/tokens.npy", folder.path() + "/tokens.offsets.npy");
}

}  // namespace varpack::cli
