// What a packed binary file must hold beyond the tables PackedFile checks on open, verified from
// the file alone (no source): `varpack inspect --check`. See verify_packed_file in io.h.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
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

std::vector<int64_t> packed_sample_lengths(const std::string& name, const PackedFile& file) {
  // Samples without a piece are zero-length ones; a header claiming far more is damaged, and would
  // otherwise ask for terabytes here.
  const int64_t plausible = std::max<int64_t>(int64_t{1} << 24, 64 * (file.num_pieces() + 1));
  if (file.num_samples() > plausible) {
    throw Error(name + ": corrupt header: " + std::to_string(file.num_samples()) + " samples for " +
                std::to_string(file.num_pieces()) + " pieces");
  }
  std::vector<int64_t> lengths(static_cast<size_t>(file.num_samples()), 0);
  const auto pieces = file.pieces();
  for (size_t p = 0; p < pieces.size(); p += 3) lengths[static_cast<size_t>(pieces[p])] += pieces[p + 2];
  return lengths;
}

namespace {

// Each sample's pieces must continue one another from token 0, in any rows: sorted by (sample,
// offset), every piece starts where the one before it of its sample ended.
void check_sample_continuity(const std::string& name, const PackedFile& file) {
  const auto pieces = file.pieces();
  std::vector<int64_t> order(static_cast<size_t>(file.num_pieces()));
  for (size_t p = 0; p < order.size(); ++p) order[p] = static_cast<int64_t>(p);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::pair(pieces[3 * a], pieces[3 * a + 1]) < std::pair(pieces[3 * b], pieces[3 * b + 1]);
  });
  int64_t sample = -1, end = 0;
  for (const int64_t p : order) {
    const int64_t expected = pieces[3 * p] == sample ? end : 0;
    if (pieces[3 * p + 1] != expected) {
      const auto row = std::upper_bound(file.row_pieces().begin(), file.row_pieces().end(), p) -
                       file.row_pieces().begin() - 1;
      throw Error(name + ": row " + std::to_string(row) + ", piece " + std::to_string(p) +
                  ": sample " + std::to_string(pieces[3 * p]) + " continues at token " +
                  std::to_string(pieces[3 * p + 1]) + ", expected " + std::to_string(expected) +
                  " (a sample's pieces follow each other from token 0, without overlap)");
    }
    sample = pieces[3 * p];
    end = pieces[3 * p + 1] + pieces[3 * p + 2];
  }
}

}  // namespace

void verify_packed_file(const std::string& name, const PackedFile& file, const ProgressFn& progress) {
  const auto ids = file.input_ids(), labels = file.labels(), positions = file.position_ids();
  const auto pieces = file.pieces();
  const auto cu = file.cu_seqlens();
  for (int64_t r = 0; r < file.num_rows(); ++r) {
    const std::string row = name + ": row " + std::to_string(r);
    const int64_t tokens = file.row_offsets()[r + 1] - file.row_offsets()[r];
    const int64_t width = file.row_width()[r];
    if (width > file.capacity() || tokens > width) {
      throw Error(row + " holds " + std::to_string(tokens) + " tokens in a width of " +
                  std::to_string(width) + " (capacity " + std::to_string(file.capacity()) + ")");
    }
    for (int64_t p = file.row_pieces()[r]; p < file.row_pieces()[r + 1]; ++p) {
      const int64_t sample = pieces[3 * p], length = pieces[3 * p + 2];
      for (int64_t j = 0; j < length; ++j) {
        const auto t = static_cast<size_t>(cu[p] + j);
        const int32_t label = labels[t];
        const char* fault = ids[t] < 0 ? "input id is negative"
                            : positions[t] != j ? "position does not restart at 0 for the piece"
                            : j == 0 && label != kIgnoreLabel ? "first label is not -100"
                            : label < 0 && label != kIgnoreLabel ? "label is negative and not -100"
                                                                 : nullptr;
        if (fault != nullptr) {
          throw Error(row + ", piece " + std::to_string(p) + " (sample " + std::to_string(sample) +
                      "), token " + std::to_string(j) + ": " + fault + " (input id " +
                      std::to_string(ids[t]) + ", label " + std::to_string(label) +
                      ", position " + std::to_string(positions[t]) + ")");
        }
      }
    }
    if (progress) progress(static_cast<uint64_t>(r + 1), static_cast<uint64_t>(file.num_rows()));
  }
  check_sample_continuity(name, file);
}

}  // namespace varpack
