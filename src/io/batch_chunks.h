// Walks a plan's rows in chunks of about a million tokens, building each chunk's PackedBatch, so
// the writers never hold more than one chunk's tensors (and cu_seqlens stays within int32).
#pragma once

#include <cstdint>
#include <functional>

#include "varpack/batch.h"
#include "varpack/io.h"
#include "varpack/pack.h"

namespace varpack::detail {

// Calls `fn(row_first, row_last, batch)` for consecutive chunks covering all rows, then reports
// progress in rows. Padding to a multiple is switched off: files hold sample tokens only. Each
// batch is checked against the plan (one segment per piece, in order) before `fn` sees it.
void for_each_batch_chunk(
    const PackPlan& plan, const TokenSource& source, const BatchOptions& options,
    const ProgressFn& progress,
    const std::function<void(int64_t row_first, int64_t row_last, const PackedBatch& batch)>& fn);

// Tokens in plan row r: the sum of its pieces' lengths.
int64_t row_tokens(const PackPlan& plan, int64_t r);

}  // namespace varpack::detail
