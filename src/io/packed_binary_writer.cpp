// The packed binary writer (docs/FORMAT.md): the header and every section's offset are known from
// the plan before any token is copied, so the token arrays are written chunk by chunk at their
// final positions and the tables after them; gaps between sections are written as zeros so the
// file is byte-identical from run to run.
#include <algorithm>
#include <vector>

#include "batch_chunks.h"
#include "binary_format.h"
#include "varpack/io.h"

namespace varpack {
namespace {

namespace bf = binary_format;

template <typename T>
void write_section(AtomicFile& out, const bf::Header& h, int section, const std::vector<T>& v) {
  out.write_at(h.offset[section], v.data(), v.size() * sizeof(T));
}

}  // namespace

void write_packed_binary(AtomicFile& out, const PackPlan& plan, const TokenSource& source,
                         const BatchOptions& options, const ProgressFn& progress) {
  bf::Header h;
  h.capacity = plan.stats.capacity;
  h.num_samples = source.num_samples();
  h.num_rows = plan.rows();
  h.num_pieces = static_cast<int64_t>(plan.pieces.size());
  std::vector<int64_t> cu_seqlens(plan.pieces.size() + 1, 0);
  std::vector<int64_t> row_offsets(static_cast<size_t>(h.num_rows) + 1, 0);
  std::vector<int64_t> pieces;
  pieces.reserve(3 * plan.pieces.size());
  for (size_t p = 0; p < plan.pieces.size(); ++p) {
    const Piece& piece = plan.pieces[p];
    cu_seqlens[p + 1] = cu_seqlens[p] + piece.length;
    pieces.insert(pieces.end(), {piece.sample, piece.offset, piece.length});
    h.max_seqlen = std::max(h.max_seqlen, piece.length);
  }
  for (int64_t r = 0; r < h.num_rows; ++r) {
    row_offsets[static_cast<size_t>(r) + 1] = cu_seqlens[static_cast<size_t>(plan.row_begin[r + 1])];
  }
  h.num_tokens = cu_seqlens.back();
  bf::lay_out(h);

  // Zeros everywhere first (header gap and the padding between sections), then the content.
  const std::vector<char> zeros(bf::kAlignment, 0);
  uint64_t end = bf::kHeaderBytes;
  const auto counts = h.counts();
  for (int s = 0; s < bf::kSections; ++s) {
    out.write_at(end, zeros.data(), h.offset[s] - end);
    end = h.offset[s] + counts[s] * bf::kElementBytes[s];
  }
  const auto header = bf::encode(h);
  out.write_at(0, header.data(), header.size());

  uint64_t token_at = 0;  // tokens written so far
  detail::for_each_batch_chunk(
      plan, source, options, progress, [&](int64_t, int64_t, const PackedBatch& batch) {
        const uint64_t bytes = batch.input_ids.size() * sizeof(int32_t);
        out.write_at(h.offset[bf::input_ids] + 4 * token_at, batch.input_ids.data(), bytes);
        out.write_at(h.offset[bf::labels] + 4 * token_at, batch.labels.data(), bytes);
        out.write_at(h.offset[bf::position_ids] + 4 * token_at, batch.position_ids.data(), bytes);
        token_at += batch.input_ids.size();
      });
  write_section(out, h, bf::cu_seqlens, cu_seqlens);
  write_section(out, h, bf::row_offsets, row_offsets);
  write_section(out, h, bf::row_pieces, plan.row_begin);
  write_section(out, h, bf::pieces, pieces);
  write_section(out, h, bf::row_width, plan.row_width);
}

}  // namespace varpack
