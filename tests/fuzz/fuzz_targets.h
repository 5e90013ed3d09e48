// The fuzz targets: each feeds one input (bytes) to one of varpack's readers through its public
// API and checks what a successful read promises (every span in bounds, token ids in range, the
// lengths-only path agreeing with the full read). A reader may refuse an input only by throwing
// varpack::Error; anything else (a crash, a sanitizer report, another exception, a broken
// promise) is a finding. Inputs reach the readers as files, as in real use.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace varpack::fuzz {

struct Target {
  std::string_view name;
  // Runs the reader on `input`, using files under `work_dir`; returns normally when the input
  // was read (and checked) or refused with varpack::Error, throws FuzzFailure otherwise.
  std::function<void(std::string_view input, const std::string& work_dir)> run;
  bool text;  // inputs are text (JSON, names): the mutator then also splices in tokens
};

// A broken promise found by a target's checks (a crash or sanitizer report ends the process).
struct FuzzFailure {
  std::string what;
};

const std::vector<Target>& targets();

// Inputs that hold two files (.npy tokens + offsets; Megatron .idx + .bin) are one byte string:
// a 4-byte little-endian length n, then the first file, then the second. A damaged n is taken
// modulo the bytes present, so every byte string splits somehow.
std::pair<std::string_view, std::string_view> split_two_files(std::string_view input);
std::string join_two_files(std::string_view first, std::string_view second);

}  // namespace varpack::fuzz
