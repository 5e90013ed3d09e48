// The subcommands of `varpack`, each a function from parsed arguments to an exit status. They
// throw varpack::Error for bad input; main() turns it into one line on stderr.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "varpack/cost_model.h"
#include "varpack/error.h"

namespace varpack::cli {

// Bad usage found after parsing (options that contradict each other): exit status 2, where a
// plain varpack::Error (bad input) exits 1.
class UsageError : public Error {
 public:
  using Error::Error;
};

struct PackArgs {
  std::vector<std::string> argv;  // the command line, for the report
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
  std::vector<std::string> argv;
  std::string input;
  std::string column = "input_ids";
  int64_t capacity = 0;
  int64_t batch_size = 8;
  double alpha = 0;  // set from the cost model's defaults in main()
  double beta = 0;
  std::string cost_model;  // a calibration JSON file; replaces alpha and beta when given
  std::string algorithm = "bfd";
  std::string overlong = "split";  // stats only counts: an over-long sample is no reason to stop
  bool json = false;               // one JSON object on stdout instead of the tables
};

struct InspectArgs {
  std::vector<std::string> argv;
  std::string file;
  bool check = false;
  bool json = false;
};

int run_pack(const PackArgs& args);
int run_stats(const StatsArgs& args);
int run_inspect(const InspectArgs& args);
int run_default();  // `varpack` with no arguments: the embedded default

// The strategy comparison (stats and the default run): rows, padding and predicted compute of
// fixed padding, padding to the longest, dynamic padding and packing.
void print_strategy_table(const StrategyComparison& comparison);

}  // namespace varpack::cli
