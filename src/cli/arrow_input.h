// Arrow inputs of the command: a Parquet file, an Arrow IPC / Feather file, a `datasets`
// save_to_disk folder or a folder of .parquet / .arrow files. Arrow C++ is not packaged in Debian
// 12, so the command hands them to python/varpack/arrow_tokens.py (pyarrow, in the .venv that
// scripts/setup.sh makes; VARPACK_PYTHON names another interpreter), which checks the column and
// writes it as a .npy token file into a temporary folder; that file is then read like any other
// and removed at once (docs/ARCHITECTURE.md says why this route).
#pragma once

#include <string>

#include "varpack/token_files.h"

namespace varpack::cli {

// True for a folder, a .parquet / .pq / .arrow / .feather / .ipc name, or a file starting with
// Parquet's or Arrow's magic bytes. Throws varpack::Error for a compressed file or an archive
// (gzip, zstd, bzip2, xz, zip), naming its format and how to decompress it.
bool is_arrow_input(const std::string& input);

// The samples of `column` (a list of integer token ids per row) of an Arrow input. Bad input
// (a missing column, strings, floats, nested lists, nulls, ids outside [0, 2^31), a truncated
// file) throws varpack::Error with the reader's message, which names file, column and row.
TokenFile open_arrow_input(const std::string& input, const std::string& column);

}  // namespace varpack::cli
