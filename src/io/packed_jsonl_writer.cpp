// The packed JSONL writer: one compact object per plan row, fields in a fixed order, integers
// formatted with std::to_chars, written through AtomicFile in blocks of about a megabyte.
#include <charconv>
#include <span>
#include <string>

#include "batch_chunks.h"
#include "varpack/io.h"

namespace varpack {
namespace {

constexpr size_t kFlushBytes = size_t{1} << 20;

template <typename T>
void append_int(std::string& out, T value) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), value);
  out.append(digits, result.ptr);
}

template <typename T>
void append_array(std::string& out, std::span<const T> values) {
  out.push_back('[');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out.push_back(',');
    append_int(out, values[i]);
  }
  out.push_back(']');
}

}  // namespace

void write_packed_jsonl(AtomicFile& out, const PackPlan& plan, const TokenSource& source,
                        const BatchOptions& options, const ProgressFn& progress) {
  std::string text;
  std::vector<int32_t> cu_seqlens;
  detail::for_each_batch_chunk(
      plan, source, options, progress,
      [&](int64_t row_first, int64_t row_last, const PackedBatch& batch) {
        const int64_t first_piece = plan.row_begin[row_first];
        for (int64_t r = row_first; r < row_last; ++r) {
          const auto begin = static_cast<size_t>(batch.row_offsets[r - row_first]);
          const auto size = static_cast<size_t>(batch.row_offsets[r - row_first + 1]) - begin;
          const auto pieces = plan.row(r);
          // Row-local cu_seqlens: the batch's, shifted to start at 0 for this row.
          cu_seqlens.assign(1, 0);
          const size_t first_segment = static_cast<size_t>(plan.row_begin[r] - first_piece);
          for (size_t s = 0; s < pieces.size(); ++s) {
            cu_seqlens.push_back(batch.cu_seqlens[first_segment + s + 1] -
                                 static_cast<int32_t>(begin));
          }
          text += "{\"input_ids\":";
          append_array(text, std::span(batch.input_ids).subspan(begin, size));
          text += ",\"labels\":";
          append_array(text, std::span(batch.labels).subspan(begin, size));
          text += ",\"position_ids\":";
          append_array(text, std::span(batch.position_ids).subspan(begin, size));
          text += ",\"cu_seqlens\":";
          append_array(text, std::span<const int32_t>(cu_seqlens));
          text += ",\"samples\":[";
          for (size_t s = 0; s < pieces.size(); ++s) {
            if (s > 0) text.push_back(',');
            text.push_back('[');
            append_int(text, pieces[s].sample);
            text.push_back(',');
            append_int(text, pieces[s].offset);
            text.push_back(',');
            append_int(text, pieces[s].length);
            text.push_back(']');
          }
          text += "]}\n";
          if (text.size() >= kFlushBytes) {
            out.write(text.data(), text.size());
            text.clear();
          }
        }
      });
  out.write(text.data(), text.size());
}

}  // namespace varpack
