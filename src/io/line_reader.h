// The chunked line reader under the JSONL reader and the packed-file check: reads a file in
// 1 MiB chunks (a smaller file in one read) into one buffer that grows only to the longest line,
// and hands out each line with simdjson's padding readable after it, so lines parse in place
// without a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "varpack/io.h"

namespace varpack::detail {

// Calls `on_line(data, size, line)` for every line (1-based `line`; the newline excluded, a
// last line without one included); at least SIMDJSON_PADDING bytes after data + size are
// readable (their content is unspecified). Returns the number of lines. Throws varpack::Error
// naming the file if it cannot be opened or read, or is a directory. Path "-" is standard input.
int64_t for_each_line(const std::string& path,
                      const std::function<void(const char* data, size_t size, int64_t line)>& on_line,
                      const ProgressFn& progress = {});

}  // namespace varpack::detail
