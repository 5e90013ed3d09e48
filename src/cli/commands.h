// The subcommands of `varpack`, each a function from parsed arguments to an exit status. They
// throw varpack::Error for bad input; main() turns it into one line on stderr.
#pragma once

#include <cstdint>
#include <string>

#include "varpack/cost_model.h"

namespace varpack::cli {

struct PackArgs {
  std::string input;   // a JSONL path, token file, Arrow input, or profile:NAME
  std::string column = "input_ids";  // an Arrow input's column of token ids
  std::string out;
  std::string format;  // "jsonl", "bin", or empty: from the extension of `out`
  std::string report;  // JSON report path, or empty
  int64_t capacity = 0;
  std::string algorithm = "bfd";
  std::string overlong = "error";
  int64_t batch_size = 8;
  uint64_t seed = 0;
  bool keep_order = false;  // the planner's row order; the rows are shuffled with `seed` otherwise
  bool check = false;  // read the written file back and verify it before it is renamed into place
  int64_t image_token_id = -1;  // placeholder id of image tokens (JSONL "images"); -1: none given
};

struct StatsArgs {
  std::string input;
  std::string column = "input_ids";
  int64_t capacity = 0;
  int64_t batch_size = 8;
  double alpha = 0;  // set from the cost model's defaults in main()
  double beta = 0;
  std::string cost_model;  // a calibration JSON file; replaces alpha and beta when given
  std::string algorithm = "bfd";
  std::string overlong = "error";
};

int run_pack(const PackArgs& args);
int run_stats(const StatsArgs& args);
int run_default();  // `varpack` with no arguments: the embedded default

// The strategy comparison (stats and the default run): rows, padding and predicted compute of
// fixed padding, padding to the longest, dynamic padding and packing.
void print_strategy_table(const StrategyComparison& comparison);

// Throws varpack::Error naming the option unless value > 0.
void require_positive(int64_t value, const char* option, const char* what);

}  // namespace varpack::cli
