// Where a command's samples come from: a JSONL file, or "profile:NAME" for a generated length
// profile (profiles.h) with stand-in token ids, handy for demos.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "varpack/io.h"

namespace varpack::cli {

// The samples of `input` (JSONL path or profile:NAME), with a progress bar while reading a file.
TokenStore load_samples(const std::string& input);

// Only the lengths of `input`'s samples: a file is scanned without keeping its tokens.
std::vector<int64_t> load_lengths(const std::string& input);

}  // namespace varpack::cli
