// Running the built `varpack` binary (VARPACK_CLI, set by CMake) from a test's temporary
// directory and capturing its exit status, stdout and stderr; shared by the command tests.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace varpack::testing {

struct Result {
  int status;  // the exit status; -1 if the process died of a signal (a crash)
  std::string out, err;
};

// Concatenation by appending: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  ((out += parts), ...);
  return out;
}

inline std::string quote(const std::string& arg) {
  std::string q = "'";
  for (const char c : arg) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

// Runs varpack with `args` from inside `dir`, capturing stdout and stderr in files kept outside
// it (so `dir` holds only what the command wrote); standard input is `stdin_path`.
inline Result run(const std::vector<std::string>& args, const TempDir& dir,
                  const std::string& stdin_path = "/dev/null") {
  static int calls = 0;  // one counter for the whole test binary (an inline function's static)
  const std::string base = cat(dir.path().string(), ".run", std::to_string(calls++));
  std::string command = cat("cd ", quote(dir.path().string()), " && ", quote(VARPACK_CLI));
  for (const auto& arg : args) command += cat(" ", quote(arg));
  command += cat(" >", quote(base + ".out"), " 2>", quote(base + ".err"), " <", quote(stdin_path));
  const int raw = std::system(command.c_str());
  Result result{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(base + ".out"),
                read_file(base + ".err")};
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return result;
}

}  // namespace varpack::testing
