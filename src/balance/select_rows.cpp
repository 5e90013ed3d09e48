// A plan of some rows of another plan (see select_rows in balance.h): what a rank builds its
// batch of a step from, its rows being scattered over the plan.
#include <string>

#include "varpack/balance.h"
#include "varpack/error.h"

namespace varpack {

PackPlan select_rows(const PackPlan& plan, std::span<const int64_t> rows) {
  PackPlan out;
  out.row_begin.reserve(rows.size() + 1);
  out.row_begin.push_back(0);
  out.row_width.reserve(rows.size());
  PlanStats& st = out.stats;
  int64_t pieces = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= plan.rows())
      throw Error("select_rows: row index " + std::to_string(rows[i]) + " (position " + std::to_string(i) +
                  ") is out of range: the plan has " + std::to_string(plan.rows()) + " rows");
    for (const Piece& p : plan.row(rows[i])) {
      out.pieces.push_back(p);
      st.tokens += p.length;
      ++pieces;
    }
    out.row_begin.push_back(static_cast<int64_t>(out.pieces.size()));
    out.row_width.push_back(plan.row_width[rows[i]]);
  }
  const PlanStats& whole = plan.stats;
  st.samples = whole.samples;
  st.truncated_tokens = whole.truncated_tokens;
  st.skipped_samples = whole.skipped_samples;
  st.split_samples = whole.split_samples;
  st.context_parallel_samples = whole.context_parallel_samples;
  st.capacity = whole.capacity;
  st.rows = out.rows();
  st.lower_bound_rows = st.capacity > 0 ? (st.tokens + st.capacity - 1) / st.capacity : 0;
  int64_t slots = 0;
  for (const int64_t w : out.row_width) slots += w;
  st.padded_tokens = slots - st.tokens;
  st.padding_rate_packed = slots > 0 ? static_cast<double>(st.padded_tokens) / static_cast<double>(slots) : 0;
  // As PlanStats defines it: every piece in a row of `capacity` of its own.
  const double unpacked = static_cast<double>(pieces) * static_cast<double>(st.capacity);
  st.padding_rate_unpacked = unpacked > 0 ? 1.0 - static_cast<double>(st.tokens) / unpacked : 0;
  return out;
}

}  // namespace varpack
