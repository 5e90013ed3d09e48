// Where a command's samples come from: a JSONL file, a token file (DATA.npy with DATA.offsets.npy,
// Megatron's PREFIX.bin / megatron:PREFIX; token_files.h), an Arrow input (Parquet, Arrow IPC /
// Feather, a `datasets` folder; arrow_input.h), or "profile:NAME" for a generated length profile
// (profiles.h) with stand-in token ids, handy for demos.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "varpack/batch.h"
#include "varpack/io.h"

namespace varpack::cli {

// How JSONL records with "images" (docs/FORMAT.md) are read: each image puts one token per patch
// into the sample, before its text (the layout of varpack.multimodal). Such a sample is never
// split or truncated: one longer than `capacity` is an error naming its file and line, whatever
// --overlong says. `token_id` is the placeholder id the image tokens get in packed rows (label
// -100); -1 where only lengths are needed, and an error naming the first record with images when
// samples are loaded.
struct ImageOptions {
  int64_t capacity = 0;
  int64_t token_id = -1;
};

// The samples of `input` (JSONL path or profile:NAME), with a progress bar while reading a file.
// `max_length` > 0 (the capacity, under --overlong error): a longer sample in a file stops the
// read with an error naming its file and line and the options that would accept it.
TokenStore load_samples(const std::string& input, int64_t max_length = 0, const ImageOptions& images = {});

// The samples of any input with their lengths: token files are memory-mapped, JSONL files and
// profiles go through load_samples. `max_length` as for load_samples; `column`: an Arrow input's
// column of token ids.
struct Samples {
  std::unique_ptr<TokenSource> source;
  std::vector<int64_t> lengths;
};
Samples open_samples(const std::string& input, int64_t max_length = 0, const ImageOptions& images = {},
                     const std::string& column = "input_ids");

// The files `input` reads (none for a profile; "-" for standard input), each with what it is to
// the command: what no output may overwrite.
std::vector<ProtectedFile> input_files(const std::string& input);

// Only the lengths of `input`'s samples (image tokens included): a file is scanned without keeping
// its tokens. A packed binary file (varpack pack -o FILE.bin) gives the lengths of the samples it
// packed (as packed: truncated samples without their cut tokens).
std::vector<int64_t> load_lengths(const std::string& input, int64_t max_length = 0,
                                  const ImageOptions& images = {}, const std::string& column = "input_ids");

}  // namespace varpack::cli
