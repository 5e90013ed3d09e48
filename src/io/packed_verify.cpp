// What a packed binary file must hold beyond the tables PackedFile checks on open, verified from
// the file alone (no source): `varpack inspect --check`. See verify_packed_file in io.h.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "binary_format.h"
#include "varpack/batch.h"
#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack {

bool is_packed_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[sizeof(binary_format::kMagic)] = {};
  const bool read_all = ::read(fd, magic, sizeof(magic)) == static_cast<ssize_t>(sizeof(magic));
  ::close(fd);
  return read_all && std::memcmp(magic, binary_format::kMagic, sizeof(magic)) == 0;
}

std::vector<int64_t> packed_sample_lengths(const PackedFile& file) {
  std::vector<int64_t> lengths(static_cast<size_t>(file.num_samples()), 0);
  const auto pieces = file.pieces();
  for (size_t p = 0; p < pieces.size(); p += 3) lengths[static_cast<size_t>(pieces[p])] += pieces[p + 2];
  return lengths;
}

void verify_packed_file(const std::string& name, const PackedFile& file, const ProgressFn& progress) {
  constexpr int64_t kMaxId = 2147483647;
  const auto ids = file.input_ids(), labels = file.labels(), positions = file.position_ids();
  const auto pieces = file.pieces();
  const auto cu = file.cu_seqlens();
  // Per sample: where its next piece must start (pieces of a split sample follow each other).
  std::vector<int64_t> next_offset(static_cast<size_t>(file.num_samples()), 0);
  for (int64_t r = 0; r < file.num_rows(); ++r) {
    const std::string row = name + ": row " + std::to_string(r);
    const int64_t tokens = file.row_offsets()[r + 1] - file.row_offsets()[r];
    const int64_t width = file.row_width()[r];
    if (width > file.capacity() || tokens > width) {
      throw Error(row + " holds " + std::to_string(tokens) + " tokens in a width of " +
                  std::to_string(width) + " (capacity " + std::to_string(file.capacity()) + ")");
    }
    for (int64_t p = file.row_pieces()[r]; p < file.row_pieces()[r + 1]; ++p) {
      const std::string piece = row + ", piece " + std::to_string(p);
      const int64_t sample = pieces[3 * p], offset = pieces[3 * p + 1], length = pieces[3 * p + 2];
      int64_t& expected = next_offset[static_cast<size_t>(sample)];
      if (offset != expected) {
        throw Error(piece + ": sample " + std::to_string(sample) + " continues at token " +
                    std::to_string(offset) + ", expected " + std::to_string(expected) +
                    " (a sample's pieces follow each other from token 0)");
      }
      expected += length;
      for (int64_t j = 0; j < length; ++j) {
        const auto t = static_cast<size_t>(cu[p] + j);
        const int32_t label = labels[t];
        const char* fault = ids[t] < 0 ? "input id is negative"
                            : positions[t] != j ? "position does not restart at 0 for the piece"
                            : j == 0 && label != kIgnoreLabel ? "first label is not -100"
                            : label < 0 && label != kIgnoreLabel ? "label is negative and not -100"
                                                                 : nullptr;
        if (fault != nullptr) {
          throw Error(piece + " (sample " + std::to_string(sample) + "), token " +
                      std::to_string(j) + ": " + fault + " (input id " + std::to_string(ids[t]) +
                      ", label " + std::to_string(label) + ", position " +
                      std::to_string(positions[t]) + "; ids must be in [0, " +
                      std::to_string(kMaxId) + "])");
        }
      }
    }
    if (progress) progress(static_cast<uint64_t>(r + 1), static_cast<uint64_t>(file.num_rows()));
  }
}

}  // namespace varpack
