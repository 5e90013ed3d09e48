// `varpack inspect FILE.bin`: what a packed binary file holds (header, counts, the lengths of its
// pieces, samples and rows, padding) and, with --check, every invariant of docs/FORMAT.md
// re-verified from the file alone.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "progress.h"
#include "report.h"
#include "varpack/error.h"
#include "varpack/io.h"

namespace varpack::cli {
namespace {

void print_lengths(const char* what, const Json& summary) {
  if (summary["count"] == 0) {
    std::printf("  %-8s none\n", what);
    return;
  }
  const Json& p = summary["percentiles"];
  std::printf("  %-8s min %lld, p50 %lld, p90 %lld, p99 %lld, max %lld, mean %.1f\n", what,
              summary["min"].get<long long>(), p["p50"].get<long long>(), p["p90"].get<long long>(),
              p["p99"].get<long long>(), summary["max"].get<long long>(), summary["mean"].get<double>());
}

}  // namespace

int run_inspect(const InspectArgs& args) {
  if (!is_packed_file(args.file)) {
    throw Error(args.file + ": not a packed file written by varpack pack -o FILE.bin (no " +
                "VARPACK magic); for JSONL output or input data use varpack stats");
  }
  const PackedFile file(args.file);
  if (args.check) {
    ProgressBar bar("checking " + args.file, "rows");
    verify_packed_file(args.file, file, bar.fn());
  }
  std::vector<int64_t> piece_lengths, row_tokens;
  int64_t padding = 0, split = 0;
  for (size_t p = 2; p < file.pieces().size(); p += 3) piece_lengths.push_back(file.pieces()[p]);
  for (int64_t r = 0; r < file.num_rows(); ++r) {
    row_tokens.push_back(file.row_offsets()[r + 1] - file.row_offsets()[r]);
    padding += file.row_width()[r] - row_tokens.back();
  }
  for (size_t p = 1; p < file.pieces().size(); p += 3) split += file.pieces()[p] == 0 ? 0 : 1;
  const std::vector<int64_t> sample_lengths = packed_sample_lengths(args.file, file);
  const int64_t empty = std::count(sample_lengths.begin(), sample_lengths.end(), int64_t{0});
  const int64_t slots = file.num_tokens() + padding;
  const double padding_rate = slots > 0 ? static_cast<double>(padding) / static_cast<double>(slots) : 0;

  Json json = report_header(args.argv);
  json["file"] = args.file;
  json["file_bytes"] = input_sizes(args.file).begin().value();
  json["format_version"] = 1;
  json["capacity"] = file.capacity();
  json["samples"] = file.num_samples();
  json["samples_without_tokens"] = empty;
  json["rows"] = file.num_rows();
  json["pieces"] = file.num_pieces();
  json["pieces_after_the_first_of_a_sample"] = split;
  json["tokens"] = file.num_tokens();
  json["max_seqlen"] = file.max_seqlen();
  json["padding_tokens"] = padding;
  json["padding_rate"] = padding_rate;
  json["piece_lengths"] = length_summary(piece_lengths);
  json["sample_lengths"] = length_summary(sample_lengths);
  json["row_tokens"] = length_summary(row_tokens);
  json["checked"] = args.check;
  if (args.json) {
    std::fputs(to_text(json).c_str(), stdout);
    return 0;
  }
  std::printf("%s: varpack packed binary file, format version 1\n", args.file.c_str());
  std::printf("  %lld samples (%lld without tokens) in %lld rows of capacity %lld: %lld pieces "
              "(%lld continuing a split sample), %lld tokens, max_seqlen %lld\n",
              static_cast<long long>(file.num_samples()), static_cast<long long>(empty),
              static_cast<long long>(file.num_rows()), static_cast<long long>(file.capacity()),
              static_cast<long long>(file.num_pieces()), static_cast<long long>(split),
              static_cast<long long>(file.num_tokens()), static_cast<long long>(file.max_seqlen()));
  std::printf("  padding %lld tokens of %lld slots (%.2f%%)\n", static_cast<long long>(padding),
              static_cast<long long>(slots), 100 * padding_rate);
  print_lengths("pieces", json["piece_lengths"]);
  print_lengths("samples", json["sample_lengths"]);
  print_lengths("rows", json["row_tokens"]);
  if (args.check) {
    std::printf("  checked: every row, piece, position and label holds the invariants of "
                "docs/FORMAT.md\n");
  }
  return 0;
}

}  // namespace varpack::cli
