// The planner: pure functions on sample lengths. lengths + PackOptions -> PackPlan (rows of pieces)
// with PlanStats. It never sees tokens; the batch builder (batch.h) turns a plan into tensors.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace varpack {

enum class Algorithm {
  ffd,        // first-fit-decreasing (the report's method), O(n log n) with a tree over row free space
  bfd,        // best-fit-decreasing, O(n log n) with an ordered index of rows by free space
  histogram,  // counts lengths (they are bounded by the capacity) and best-fits by length class
  none,       // baseline "fixed padding": one sample per row, every row padded to the capacity
  dynamic,    // baseline "dynamic padding": batches of batch_size samples in input order, each row
              // padded to the longest sample of its batch
};

enum class OverlongPolicy {
  error,     // a sample longer than the capacity is an error naming the sample (the default)
  truncate,  // keep the first `capacity` tokens, count the rest in PlanStats::truncated_tokens
  split,     // cut into pieces of at most `capacity`; each piece is packed as its own sample
  context_parallel,  // "cp": left out of the rows, counted in PlanStats::context_parallel_samples;
                     // the caller runs each over context-parallel ranks (python/varpack/cp_schedule.py)
};

// The largest capacity: a row's cu_seqlens are int32 (what varlen attention kernels take).
inline constexpr int64_t kMaxCapacity = 2147483647;

struct PackOptions {
  int64_t capacity = 4096;  // in [1, kMaxCapacity]
  Algorithm algorithm = Algorithm::bfd;
  OverlongPolicy overlong = OverlongPolicy::error;
  int64_t batch_size = 8;     // samples per batch, for Algorithm::dynamic only
  bool shuffle_rows = false;  // permute the final rows with `seed` (deterministic)
  uint64_t seed = 0;
};

// One contiguous run of a sample's tokens placed in a row: tokens [offset, offset + length) of
// sample `sample` (0-based index into the input lengths). offset > 0 only for split samples.
struct Piece {
  int64_t sample;
  int64_t offset;
  int64_t length;
  friend bool operator==(const Piece&, const Piece&) = default;
};

struct PlanStats {
  int64_t samples = 0;           // input samples, zero-length ones included
  int64_t tokens = 0;            // tokens placed in rows (after truncation)
  int64_t rows = 0;
  int64_t capacity = 0;
  int64_t lower_bound_rows = 0;  // ceil(tokens / capacity): no packing can use fewer rows
  int64_t padded_tokens = 0;     // sum of row widths minus tokens
  double padding_rate_packed = 0;    // padded_tokens / sum of row widths, for this plan's algorithm
  double padding_rate_unpacked = 0;  // padding if every piece (every non-empty sample, or each
                                     // piece of a split one) had a row of `capacity`
  int64_t truncated_tokens = 0;
  int64_t skipped_samples = 0;   // zero-length samples: they get no piece
  int64_t split_samples = 0;     // samples cut into several pieces by OverlongPolicy::split
  int64_t context_parallel_samples = 0;  // samples left out by OverlongPolicy::context_parallel
  int64_t gap_to_lower_bound() const { return rows - lower_bound_rows; }
};

// Rows in compressed form: the pieces of row r are pieces[row_begin[r] .. row_begin[r + 1]).
// row_width[r] is the padded width the row occupies: the capacity for packing and fixed padding,
// the batch's longest sample for dynamic padding.
struct PackPlan {
  std::vector<Piece> pieces;
  std::vector<int64_t> row_begin;  // rows + 1 entries, row_begin[0] == 0
  std::vector<int64_t> row_width;  // rows entries
  PlanStats stats;

  int64_t rows() const { return static_cast<int64_t>(row_width.size()); }
  std::span<const Piece> row(int64_t r) const {
    return {pieces.data() + row_begin[r], static_cast<size_t>(row_begin[r + 1] - row_begin[r])};
  }
  friend bool operator==(const PackPlan& a, const PackPlan& b) {
    return a.pieces == b.pieces && a.row_begin == b.row_begin && a.row_width == b.row_width;
  }
};

// Plans rows for `lengths` (each >= 0). Throws varpack::Error for capacity <= 0, a negative length
// (naming the sample), or an over-length sample under OverlongPolicy::error (naming the sample, its
// length, the capacity and the two other policies). Same input and options give an identical plan.
PackPlan plan_packing(std::span<const int64_t> lengths, const PackOptions& options);

// The same plan, written into `plan` with its buffers reused: planning again (say, every epoch)
// needs no new memory for the plan once its buffers have grown (shuffle_rows still builds the
// permuted copy), which matters for tens of millions of samples, where touching fresh memory
// costs more than the packing itself.
void plan_packing_into(std::span<const int64_t> lengths, const PackOptions& options,
                       PackPlan& plan);

// Names used by the CLI and Python ("ffd", "bfd", "histogram", "none", "dynamic"; "error",
// "truncate", "split", "cp").
// The parsers throw varpack::Error listing the accepted names.
Algorithm parse_algorithm(std::string_view name);
OverlongPolicy parse_overlong_policy(std::string_view name);
std::string_view to_string(Algorithm algorithm);
std::string_view to_string(OverlongPolicy policy);
// Every accepted name, in the parsers' order (for the command line's choices).
std::vector<std::string> algorithm_names();
std::vector<std::string> overlong_policy_names();

}  // namespace varpack
