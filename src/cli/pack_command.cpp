// `varpack pack`: read samples, plan rows, write the packed file (and the JSON report), print a
// short summary. Both outputs are opened (as temporary files) before any work, so a missing
// output directory fails at once, and they are renamed into place only after everything worked.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "commands.h"
#include "input.h"
#include "json_writer.h"
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

void require_positive(int64_t value, const char* option, const char* what) {
  if (value <= 0) {
    throw Error(std::string(option) + " must be a positive number (" + what + "), got " +
                std::to_string(value));
  }
}

int run_pack(const PackArgs& args) {
  require_positive(args.capacity, "--capacity", "tokens per row");
  require_positive(args.batch_size, "--batch-size", "samples per batch for dynamic padding");
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

  AtomicFile out(args.out);
  std::optional<AtomicFile> report;
  if (!args.report.empty()) report.emplace(args.report);

  const auto start = Clock::now();
  const int64_t reject_longer_than =
      options.overlong == OverlongPolicy::error ? options.capacity : 0;
  if (args.image_token_id != -1 && (args.image_token_id < 0 || args.image_token_id > INT32_MAX)) {
    throw Error("--image-token-id must be a token id in [0, 2147483647], got " +
                std::to_string(args.image_token_id));
  }
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
      write_packed_binary(out, plan, samples, {}, bar.fn());
    } else {
      write_packed_jsonl(out, plan, samples, {}, bar.fn());
    }
  }
  const double write_seconds = seconds_since(write_start);
  const auto check_start = Clock::now();
  if (args.check) {
    ProgressBar bar("checking " + args.out, "rows");
    check_packed_file(out.temp_path(), args.out, format, plan, samples, {}, bar.fn());
  }
  const double check_seconds = seconds_since(check_start);
  const double seconds = seconds_since(start);

  const PlanStats& s = plan.stats;
  if (report) {
    JsonObject json;
    json.add("input", args.input)
        .add("output", args.out)
        .add("format", to_string(format))
        .add("algorithm", to_string(options.algorithm))
        .add("overlong", to_string(options.overlong))
        .add("capacity", s.capacity)
        .add("batch_size", options.batch_size)
        .add("seed", options.seed)
        .add("shuffle", options.shuffle_rows)
        .add("samples", s.samples)
        .add("tokens", s.tokens)
        .add("rows", s.rows)
        .add("lower_bound_rows", s.lower_bound_rows)
        .add("gap_to_lower_bound", s.gap_to_lower_bound())
        .add("padded_tokens", s.padded_tokens)
        .add("padding_rate_packed", s.padding_rate_packed)
        .add("padding_rate_unpacked", s.padding_rate_unpacked)
        .add("truncated_tokens", s.truncated_tokens)
        .add("skipped_samples", s.skipped_samples)
        .add("split_samples", s.split_samples)
        .add("seconds", seconds)
        .add("seconds_read", read_seconds)
        .add("seconds_plan", plan_seconds)
        .add("seconds_write", write_seconds)
        .add("checked", args.check);
    const std::string text = json.str();
    report->write(text.data(), text.size());
  }
  out.commit();
  if (report) report->commit();

  std::printf("packed %lld samples (%lld tokens) from %s into %lld rows of %lld with %s -> %s (%s)\n",
              static_cast<long long>(s.samples), static_cast<long long>(s.tokens),
              args.input.c_str(), static_cast<long long>(s.rows),
              static_cast<long long>(s.capacity), std::string(to_string(options.algorithm)).c_str(),
              args.out.c_str(), std::string(to_string(format)).c_str());
  std::printf("  lower bound %lld rows (+%lld); padding %.2f%% unpacked (a row of L per sample) "
              "-> %.2f%% in these rows\n",
              static_cast<long long>(s.lower_bound_rows),
              static_cast<long long>(s.gap_to_lower_bound()), 100 * s.padding_rate_unpacked,
              100 * s.padding_rate_packed);
  if (options.shuffle_rows) {
    std::printf("  rows shuffled with seed %llu (--keep-order keeps the planner's order)\n",
                static_cast<unsigned long long>(options.seed));
  } else {
    std::printf("  rows in the planner's order (--keep-order), longest-first packers' fullest rows first\n");
  }
  std::printf("  %lld truncated tokens, %lld zero-length samples skipped, %lld samples split\n",
              static_cast<long long>(s.truncated_tokens),
              static_cast<long long>(s.skipped_samples), static_cast<long long>(s.split_samples));
  std::printf("  %.3f s (read %.3f, plan %.3f, write %.3f)%s\n", seconds, read_seconds,
              plan_seconds, write_seconds,
              report ? (", report " + args.report).c_str() : "");
  if (args.check) {
    std::printf("  checked in %.3f s: every token, position, label and cu_seqlens of %s matches "
                "the input\n", check_seconds, args.out.c_str());
  }
  return 0;
}

}  // namespace varpack::cli
