// Reading a cost model saved by `python -m varpack calibrate` (varpack.CostModel.save): a JSON
// object whose "alpha", "beta" and "overhead" (c) are seconds per token, per token^2 and per row.
// Other keys (the device, the model, the measured points) are ignored here.
#pragma once

#include <string>

#include "varpack/cost_model.h"

namespace varpack::cli {

// Throws varpack::Error naming the file and the key at fault (missing, not a number, negative).
CostModel read_cost_model(const std::string& path);

}  // namespace varpack::cli
