// `varpack pack`: read samples, plan rows, write the packed file (and the JSON report), print a
// short summary. Both outputs are opened (as temporary files) before any work, so a missing
// output directory fails at once, and they are renamed into place only after everything worked.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "commands.h"
#include "input.h"
#include "report.h"
#include "progress.h"
#include "varpack/error.h"
#include "varpack/io.h"
#include "varpack/pack.h"

namespace varpack::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int run_pack(const PackArgs& args) {
  PackOptions options;
  options.capacity = args.capacity;
  options.algorithm = parse_algorithm(args.algorithm);
  options.overlong = parse_overlong_policy(args.overlong);
  if (options.overlong == OverlongPolicy::context_parallel)  // the file would miss those samples
    throw Error("--overlong cp leaves the long samples out of the rows; it is for Python's context-parallel "
                "schedule (varpack.cp_schedule), not a packed file: use truncate or split here");
  options.batch_size = args.batch_size;
  options.seed = args.seed;
  // Shuffled by default: the planner's order runs long rows first, a curriculum nobody asked for.
  options.shuffle_rows = !args.keep_order;
  if (args.out.ends_with(".parquet") || args.out.ends_with(".arrow")) {
    throw Error("--out " + args.out + ": varpack pack writes packed JSONL or .bin; for Parquet rows with " +
                "TRL's columns run `python -m varpack export " + args.input + " -L " +
                std::to_string(args.capacity) + " -o " + args.out + "`");
  }
  const OutputFormat format =
      args.format.empty() ? output_format_for_path(args.out) : parse_output_format(args.format);

  // Neither output may be an input (or a file beside it) or the other output: refused here,
  // before anything is read.
  // Their errors are all about the paths given (a collision, a directory that does not exist).
  std::vector<ProtectedFile> protect = input_files(args.input);
  std::optional<AtomicFile> out, report;
  try {
    out.emplace(args.out, protect);
    if (!args.report.empty()) {
      protect.push_back({args.out == "-" ? "/dev/stdout" : args.out, "--out"});
      report.emplace(args.report, protect);
    }
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  // The summary goes where the packed rows do not.
  std::FILE* summary = out->to_stdout() || (report && report->to_stdout()) ? stderr : stdout;

  const auto start = Clock::now();
  const int64_t reject_longer_than =
      options.overlong == OverlongPolicy::error ? options.capacity : 0;
  const Samples input = open_samples(args.input, reject_longer_than,
                                     ImageOptions{options.capacity, args.image_token_id}, args.column);
  const TokenSource& samples = *input.source;
  const double read_seconds = seconds_since(start);

  const auto plan_start = Clock::now();
  PackPlan plan;
  try {
    plan = plan_packing(input.lengths, options);
  } catch (const Error& e) {
    // The planner names the sample (its 0-based record number); add the file it came from.
    throw Error(args.input + ": " + e.what());
  }
  const double plan_seconds = seconds_since(plan_start);

  const auto write_start = Clock::now();
  {
    ProgressBar bar("writing " + args.out, "rows");
    if (format == OutputFormat::binary) {
      write_packed_binary(*out, plan, samples, {}, bar.fn());
    } else {
      write_packed_jsonl(*out, plan, samples, {}, bar.fn());
    }
  }
  const double write_seconds = seconds_since(write_start);
  const auto check_start = Clock::now();
  if (args.check) {
    ProgressBar bar("checking " + args.out, "rows");
    check_packed_file(out->temp_path(), args.out, format, plan, samples, {}, bar.fn());
  }
  const double check_seconds = seconds_since(check_start);
  const double seconds = seconds_since(start);

  const PlanStats& s = plan.stats;
  if (report) {
    Json json = report_header(args.argv);
    json["input"] = args.input;
    json["input_bytes"] = input_sizes(args.input);
    json["output"] = args.out;
    json["format"] = to_string(format);
    json["algorithm"] = to_string(options.algorithm);
    json["overlong"] = to_string(options.overlong);
    json["capacity"] = s.capacity;
    json["batch_size"] = options.batch_size;
    json["seed"] = options.seed;
    json["shuffle"] = options.shuffle_rows;
    json["samples"] = s.samples;
    json["tokens"] = s.tokens;
    json["lengths"] = length_summary(input.lengths);
    json["rows"] = s.rows;
    json["lower_bound_rows"] = s.lower_bound_rows;
    json["gap_to_lower_bound"] = s.gap_to_lower_bound();
    json["padded_tokens"] = s.padded_tokens;
    json["padding_rate_packed"] = s.padding_rate_packed;
    json["padding_rate_unpacked"] = s.padding_rate_unpacked;
    json["truncated_tokens"] = s.truncated_tokens;
    json["skipped_samples"] = s.skipped_samples;
    json["split_samples"] = s.split_samples;
    json["seconds"] = seconds;
    json["seconds_read"] = read_seconds;
    json["seconds_plan"] = plan_seconds;
    json["seconds_write"] = write_seconds;
    json["checked"] = args.check;
    const std::string text = to_text(json);
    report->write(text.data(), text.size());
  }
  out->commit();
  if (report) report->commit();

  std::fprintf(summary, "packed %lld samples (%lld tokens) from %s into %lld rows of %lld with %s -> %s (%s)\n",
              static_cast<long long>(s.samples), static_cast<long long>(s.tokens),
              args.input.c_str(), static_cast<long long>(s.rows),
              static_cast<long long>(s.capacity), std::string(to_string(options.algorithm)).c_str(),
              args.out.c_str(), std::string(to_string(format)).c_str());
  std::fprintf(summary, "  lower bound %lld rows (+%lld); padding %.2f%% unpacked (a row of L per sample) "
              "-> %.2f%% in these rows\n",
              static_cast<long long>(s.lower_bound_rows),
              static_cast<long long>(s.gap_to_lower_bound()), 100 * s.padding_rate_unpacked,
              100 * s.padding_rate_packed);
  if (options.shuffle_rows) {
    std::fprintf(summary, "  rows shuffled with seed %llu (--keep-order keeps the planner's order)\n",
                static_cast<unsigned long long>(options.seed));
  } else {
    std::fprintf(summary, "  rows in the planner's order (--keep-order), longest-first packers' fullest rows first\n");
  }
  std::fprintf(summary, "  %lld truncated tokens, %lld zero-length samples skipped, %lld samples split\n",
              static_cast<long long>(s.truncated_tokens),
              static_cast<long long>(s.skipped_samples), static_cast<long long>(s.split_samples));
  std::fprintf(summary, "  %.3f s (read %.3f, plan %.3f, write %.3f)%s\n", seconds, read_seconds,
              plan_seconds, write_seconds,
              report ? (", report " + args.report).c_str() : "");
  if (args.check) {
    std::fprintf(summary, "  checked in %.3f s: every token, position, label and cu_seqlens of %s matches "
                "the input\n", check_seconds, args.out.c_str());
  }
  return 0;
}

}  // namespace varpack::cli
