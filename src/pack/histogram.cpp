// Histogram packing: best-fit-decreasing run on the histogram of lengths instead of on samples.
// Lengths are bounded by the capacity, so they are counted (no sort); rows with the same content
// are handled as one group ("these k rows each hold pattern P and have f free"), so the search
// costs O(groups x log capacity), independent of the number of samples; samples are dealt into
// the groups' rows at the end, in input order within each length. Graphcore's SPFHP (Krell et
// al., "Efficient sequence packing without cross-contamination", 2021) packs histograms the same
// way; here the rule is exactly best-fit, so the row count equals pack_best_fit_decreasing's.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "algorithms.h"
#include "free_space_index.h"

namespace varpack::detail {
namespace {

// A pattern is a path in a tree: each node adds `copies` pieces of `length` to its parent's.
struct PatternNode {
  int64_t parent;  // -1 for the root (an empty row)
  int64_t length;
  int64_t copies;
};

struct Group {
  int64_t rows;
  int64_t pattern;  // a PatternNode index
};

class GroupPacker {
 public:
  explicit GroupPacker(int64_t capacity) : capacity_(capacity), index_(capacity) {}

  // Best-fit for `count` pieces of `length`, longest lengths first. Item by item, best-fit puts a
  // piece into the row with the least room f >= length; that row then has f - length, still the
  // least room >= length if it fits another piece, so it takes floor(f / length) pieces in a row
  // before the search moves on. All rows of a group have the same f, so the group is served
  // whole: t rows take m = floor(f / length) pieces each, at most one more row takes the rest.
  void place(int64_t length, int64_t count) {
    while (count > 0) {
      int64_t free = 0;
      const int64_t g = index_.take_best_fit(length, &free);
      if (g < 0) {
        // No row has room: new rows, each filled with q pieces before the next one opens.
        const int64_t q = capacity_ / length;
        if (count / q > 0) add_group(count / q, -1, length, q, capacity_ - q * length);
        if (count % q > 0) add_group(1, -1, length, count % q, capacity_ - (count % q) * length);
        return;
      }
      // add_group may move groups_: work on a copy of the row count and write it back.
      const int64_t m = free / length;
      const int64_t pattern = groups_[static_cast<size_t>(g)].pattern;
      int64_t rows = groups_[static_cast<size_t>(g)].rows;
      const int64_t t = std::min(rows, count / m);
      rows -= t;
      count -= t * m;
      if (t > 0) add_group(t, pattern, length, m, free - m * length);
      if (count > 0 && rows > 0) {
        // Fewer than m pieces left: one more row of this group takes them all.
        rows -= 1;
        add_group(1, pattern, length, count, free - count * length);
        count = 0;
      }
      groups_[static_cast<size_t>(g)].rows = rows;
      if (rows > 0) index_.insert(g, free);
    }
  }

  const std::vector<Group>& groups() const { return groups_; }
  const std::vector<PatternNode>& patterns() const { return patterns_; }

 private:
  void add_group(int64_t rows, int64_t parent, int64_t length, int64_t copies, int64_t free) {
    patterns_.push_back({parent, length, copies});
    groups_.push_back({rows, static_cast<int64_t>(patterns_.size()) - 1});
    // A row with no room left for a piece of length >= 1 never enters the index again.
    if (free > 0) index_.insert(static_cast<int64_t>(groups_.size()) - 1, free);
  }

  int64_t capacity_;
  FreeSpaceIndex index_;
  std::vector<Group> groups_;
  std::vector<PatternNode> patterns_;
};

// Where the pieces of one length go. Each (group, pattern node) holding that length is a run:
// `rows` rows starting at piece index `base`, `stride` pieces apart, `copies` slots per row.
struct Run {
  int64_t base;
  int64_t stride;
  int64_t copies;
  int64_t rows;
};

// The next free slot of one length, walking its runs in order.
struct Cursor {
  int64_t slot = 0;         // where the next piece of this length goes
  int64_t copies_left = 0;  // slots left in the current row
  int64_t rows_left = 0;    // rows left in the current run, the current one included
  int64_t copies = 0;       // the current run's copies per row
  int64_t jump = 0;         // from the last slot of a row to the first of the next: stride - copies + 1
  int64_t run = 0;          // index into the runs of this length
};

// `rows` rows alike, each holding shape_items[first, last) as (length, copies).
struct RowShape {
  int64_t rows;
  size_t first;
  size_t last;
};

struct Layout {
  std::vector<RowShape> shapes;  // the rows in plan order, one shape per group
  std::vector<std::pair<int64_t, int64_t>> shape_items;  // (length, copies), longest first
  std::vector<int64_t> runs_begin;  // the runs of length l: runs[runs_begin[l], runs_begin[l+1])
  std::vector<Run> runs;
};

// Lays the rows out, groups in creation order, and fills the plan's row index and every
// length's runs.
Layout lay_out(const GroupPacker& packer, size_t classes, int64_t capacity, PackPlan& plan) {
  Layout out;
  const std::vector<PatternNode>& nodes = packer.patterns();
  for (const Group& group : packer.groups()) {
    if (group.rows == 0) continue;
    const size_t first = out.shape_items.size();
    for (int64_t n = group.pattern; n >= 0; n = nodes[static_cast<size_t>(n)].parent)
      out.shape_items.push_back(
          {nodes[static_cast<size_t>(n)].length, nodes[static_cast<size_t>(n)].copies});
    std::reverse(out.shape_items.begin() + static_cast<std::ptrdiff_t>(first),
                 out.shape_items.end());
    out.shapes.push_back({group.rows, first, out.shape_items.size()});
  }

  out.runs_begin.assign(classes + 1, 0);
  for (const RowShape& shape : out.shapes)
    for (size_t i = shape.first; i < shape.last; ++i)
      ++out.runs_begin[static_cast<size_t>(out.shape_items[i].first) + 1];
  for (size_t l = 0; l < classes; ++l) out.runs_begin[l + 1] += out.runs_begin[l];
  out.runs.resize(static_cast<size_t>(out.runs_begin[classes]));
  std::vector<int64_t> next_run(out.runs_begin.begin(), out.runs_begin.end() - 1);

  plan.row_begin.clear();
  plan.row_begin.push_back(0);
  int64_t piece = 0;
  for (const RowShape& shape : out.shapes) {
    int64_t stride = 0;
    for (size_t i = shape.first; i < shape.last; ++i) stride += out.shape_items[i].second;
    int64_t position = piece;
    for (size_t i = shape.first; i < shape.last; ++i) {
      const auto [length, copies] = out.shape_items[i];
      out.runs[static_cast<size_t>(next_run[static_cast<size_t>(length)]++)] = {position, stride,
                                                                                copies, shape.rows};
      position += copies;
    }
    for (int64_t r = 0; r < shape.rows; ++r) plan.row_begin.push_back(piece += stride);
  }
  plan.row_width.assign(plan.row_begin.size() - 1, capacity);
  return out;
}

// Deals the samples into the laid-out rows, each length's samples in input order, in two passes
// that touch no memory beyond the plan's own pieces:
//  1. over the input, each piece's sample index goes to its slot; the indices are kept in the
//     last sizeof(Index) * pieces bytes of the pieces buffer (a scatter 24 / sizeof(Index) times
//     denser than scattering whole pieces, so it stays in cache far longer);
//  2. over the slots in order, each index becomes its Piece, written front to back. Piece k ends
//     at byte 24 (k + 1), below index k + 1 at byte (24 - w) pieces + w (k + 1) for every
//     k < pieces, so the expansion never overwrites an index it has yet to read.
template <typename Index>
void deal(std::span<const int64_t> lengths, const PackOptions& options, const PieceTotals& totals,
          const Layout& layout, PackPlan& plan) {
  static_assert(std::is_trivially_copyable_v<Piece> && sizeof(Index) < sizeof(Piece));
  const int64_t capacity = options.capacity;
  const size_t classes = layout.runs_begin.size() - 1;
  const auto pieces = static_cast<size_t>(totals.pieces);
  plan.pieces.resize(pieces);
  auto* const index = reinterpret_cast<std::byte*>(plan.pieces.data()) +
                      pieces * (sizeof(Piece) - sizeof(Index));

  std::vector<Cursor> cursor(classes);
  auto load_run = [&](Cursor& c) {
    const Run& run = layout.runs[static_cast<size_t>(c.run)];
    c.slot = run.base;
    c.copies_left = c.copies = run.copies;
    c.rows_left = run.rows;
    c.jump = run.stride - run.copies + 1;
  };
  for (size_t l = 1; l < classes; ++l) {
    cursor[l].run = layout.runs_begin[l];
    if (layout.runs_begin[l] < layout.runs_begin[l + 1]) load_run(cursor[l]);
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    for_each_piece(lengths[i], capacity, options.overlong, [&](int64_t, int64_t n) {
      Cursor& c = cursor[static_cast<size_t>(n)];
      const auto sample = static_cast<Index>(i);
      std::memcpy(index + static_cast<size_t>(c.slot) * sizeof(Index), &sample, sizeof(Index));
      // Whether this was the row's last copy depends on the sample's length, which the branch
      // predictor cannot guess: select instead of branching. Run ends are rare and may branch.
      const bool row_done = --c.copies_left == 0;
      c.slot += row_done ? c.jump : 1;
      c.copies_left = row_done ? c.copies : c.copies_left;
      c.rows_left -= row_done ? 1 : 0;
      if (c.rows_left == 0 && ++c.run < layout.runs_begin[static_cast<size_t>(n) + 1]) load_run(c);
    });
  }

  PieceOffsets offsets(lengths, capacity, totals.split_samples > 0);
  size_t k = 0;
  for (const RowShape& shape : layout.shapes) {
    for (int64_t r = 0; r < shape.rows; ++r) {
      for (size_t item = shape.first; item < shape.last; ++item) {
        const auto [length, copies] = layout.shape_items[item];
        for (int64_t c = 0; c < copies; ++c, ++k) {
          Index stored;
          std::memcpy(&stored, index + k * sizeof(Index), sizeof(Index));
          const auto sample = static_cast<int64_t>(stored);
          plan.pieces[k] = {sample, offsets.next(sample, length), length};
        }
      }
    }
  }
}

}  // namespace

void pack_histogram(std::span<const int64_t> lengths, const PackOptions& options,
                    const PieceTotals& totals, const std::vector<int64_t>& count,
                    PackPlan& plan) {
  const int64_t capacity = options.capacity;
  const auto classes = static_cast<size_t>(capacity) + 1;

  GroupPacker packer(capacity);
  for (int64_t l = capacity; l >= 1; --l)
    if (count[static_cast<size_t>(l)] > 0) packer.place(l, count[static_cast<size_t>(l)]);

  const Layout layout = lay_out(packer, classes, capacity, plan);
  if (lengths.size() <= std::numeric_limits<uint32_t>::max()) {
    deal<uint32_t>(lengths, options, totals, layout, plan);
  } else {
    deal<uint64_t>(lengths, options, totals, layout, plan);
  }
}

}  // namespace varpack::detail
