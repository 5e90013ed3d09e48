// `varpack`: the command line on the library. Parses arguments with CLI11 and runs a subcommand;
// with no arguments it runs the embedded default. Every error, ours or the parser's, becomes one
// line "varpack: error: ..." on stderr and an exit status: 1 for bad input (a file's content),
// 2 for bad usage (an option's value, CLI11's validators; a missing option; a wrong combination).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "progress.h"
#include "varpack/cost_model.h"
#include "varpack/error.h"
#include "varpack/pack.h"

namespace {

constexpr int kBadInput = 1;
constexpr int kBadUsage = 2;

int fail(const std::string& message, int status) {
  std::fprintf(stderr, "varpack: error: %s\n", message.c_str());
  return status;
}

// The inputs both commands take (dispatched in input.cpp).
constexpr const char* kInputHelp =
    "JSONL file (- for standard input); DATA.npy (flat token ids: int32, int64, uint16 or uint32) "
    "with its int64 sample offsets in DATA.offsets.npy beside it (n + 1 values from 0); a "
    "Megatron-LM indexed dataset as PREFIX.bin (with PREFIX.idx) or megatron:PREFIX; a Parquet or "
    "Arrow IPC / Feather file, a Hugging Face datasets save_to_disk folder or a folder of .parquet "
    "/ .arrow files (--column); or profile:NAME for a generated length profile";
constexpr const char* kColumnHelp =
    "for Parquet / Arrow input: the column holding each sample's list of token ids";

const CLI::Range kCapacityRange(int64_t{1}, varpack::kMaxCapacity, "capacity");
const CLI::Range kTokenIdRange(int64_t{0}, int64_t{2147483647}, "token id");
const CLI::Range kBatchSizeRange(int64_t{1}, int64_t{2147483647}, "batch size");

}  // namespace

int main(int argc, char** argv) {
  using namespace varpack::cli;
  CLI::App app{"varpack: sequence packing for padding-free transformer training.\n"
               "With no arguments, packs the embedded default (the report's length profile) and "
               "shows what packing saves.",
               "varpack"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", VARPACK_VERSION);
  app.footer("Exit status: 0 done, 1 bad input (a file's content; the message names the file and "
             "line or sample), 2 bad usage (an option or its value). Outputs are never left "
             "partial and never overwrite an input.");
  bool quiet = false;
  double progress_every = -1;
  app.add_flag("--quiet,-q", quiet, "no progress on stderr");
  app.add_option("--progress-every", progress_every,
                 "print a progress line (elapsed time, ETA) every SECONDS instead of a bar; "
                 "default when stderr is not a terminal: every 10 s")
      ->check(CLI::NonNegativeNumber);
  const std::vector<std::string> command_line(argv, argv + argc);

  PackArgs pack;
  pack.argv = command_line;
  CLI::App* pack_cmd = app.add_subcommand(
      "pack", "Pack the samples of a JSONL file (one {\"input_ids\": [...]} per line), a .npy token file "
      "or a Megatron dataset into rows");
  pack_cmd->fallthrough();
  pack_cmd->add_option("input", pack.input, kInputHelp)
      ->required();
  pack_cmd->add_option("--capacity,-L", pack.capacity, "tokens per row (1 to 2^31 - 1)")
      ->required()->check(kCapacityRange);
  pack_cmd->add_option("--out,-o", pack.out,
                       "output file; a .bin name selects the binary format; - or a FIFO or device "
                       "is written as a stream; a symbolic link is written through")
      ->required();
  pack_cmd->add_option("--algorithm,-a", pack.algorithm,
                       "ffd | bfd | histogram | none (one sample per row) | dynamic (batches "
                       "padded to their longest)")
      ->capture_default_str()->check(CLI::IsMember(varpack::algorithm_names()));
  pack_cmd->add_option("--overlong", pack.overlong,
                       "samples longer than L: error | truncate | split")
      ->capture_default_str()->check(CLI::IsMember(varpack::overlong_policy_names()));
  pack_cmd->add_option("--column", pack.column, kColumnHelp)->capture_default_str();
  CLI::Option* seed = pack_cmd->add_option("--seed", pack.seed, "seed of the row shuffle")->capture_default_str();
  pack_cmd->add_flag("--keep-order", pack.keep_order,
                     "keep the planner's row order (longest-first packers put their fullest rows "
                     "first); by default the rows are shuffled with --seed")
      ->excludes(seed);
  // Shuffling is the default; the flag stays accepted for the commands written before.
  bool shuffle = true;
  pack_cmd->add_flag("--shuffle", shuffle, "shuffle the rows with --seed (the default)")->excludes("--keep-order");
  pack_cmd->add_option("--batch-size,-B", pack.batch_size,
                       "samples per batch, for --algorithm dynamic")
      ->capture_default_str()->check(kBatchSizeRange);
  pack_cmd->add_option("--format", pack.format,
                       "jsonl | bin (default: bin if --out ends in .bin, else jsonl)")
      ->check(CLI::IsMember({"jsonl", "bin"}));
  pack_cmd->add_flag("--check", pack.check,
                     "read the written file back and verify every token, position, label and "
                     "cu_seqlens against the input before renaming it into place");
  pack_cmd->add_option("--report", pack.report,
                       "also write a JSON report (version, command line, samples, tokens, rows, "
                       "padding, length percentiles, seconds, ...)");
  pack_cmd->add_option("--image-token-id", pack.image_token_id,
                       "for JSONL records with \"images\": the token id of the image placeholders "
                       "(one per patch, before the record's text, label -100)")
      ->check(kTokenIdRange);

  StatsArgs stats;
  stats.argv = command_line;
  const varpack::CostModel default_model;
  stats.alpha = default_model.alpha;
  stats.beta = default_model.beta;
  CLI::App* stats_cmd = app.add_subcommand(
      "stats",
      "Length histogram and, side by side, padding and predicted compute of fixed padding to L, "
      "padding to the longest sample, dynamic padding and packing");
  stats_cmd->fallthrough();
  stats_cmd->add_option("input", stats.input,
                        std::string(kInputHelp) + "; or a packed FILE.bin written by varpack pack")
      ->required();
  stats_cmd->add_option("--capacity,-L", stats.capacity, "tokens per row (1 to 2^31 - 1)")
      ->required()->check(kCapacityRange);
  stats_cmd->add_option("--column", stats.column, kColumnHelp)->capture_default_str();
  stats_cmd->add_option("--alpha", stats.alpha,
                        "cost per token (seconds; default: a 542M-parameter model's fit on an "
                        "H200)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  stats_cmd->add_option("--beta", stats.beta,
                        "cost per token^2 of one sample's attention (seconds; same fit)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  stats_cmd->add_option("--cost-model", stats.cost_model,
                        "a cost model fitted on your model and GPU (JSON from `python -m varpack "
                        "calibrate`): its alpha, beta and per-row overhead replace --alpha/--beta");
  stats_cmd->add_option("--batch-size,-B", stats.batch_size,
                        "samples per batch for the dynamic padding baseline")
      ->capture_default_str()->check(kBatchSizeRange);
  stats_cmd->add_option("--algorithm,-a", stats.algorithm, "packer for the packed line: ffd | bfd | histogram")
      ->capture_default_str()->check(CLI::IsMember({"ffd", "bfd", "histogram"}));
  stats_cmd->add_option("--overlong", stats.overlong,
                        "samples longer than L in the packed line: error | truncate | split "
                        "(counted either way)")
      ->capture_default_str()->check(CLI::IsMember(varpack::overlong_policy_names()));
  stats_cmd->add_flag("--json", stats.json,
                      "print the statistics as one JSON object (with version, command line, "
                      "input sizes and length percentiles) instead of the tables");
  stats_cmd->footer(
      "Cost model: a sample (or padded row) of n tokens costs alpha*n + beta*n^2, and each row a "
      "fixed overhead c (0 unless --cost-model gives one). Padded strategies pay it on the padded "
      "width; packing with varlen attention pays it per sample.");

  InspectArgs inspect;
  inspect.argv = command_line;
  CLI::App* inspect_cmd = app.add_subcommand(
      "inspect", "Show a packed FILE.bin written by varpack pack: header, counts, length and "
      "padding statistics; with --check, re-verify every invariant of docs/FORMAT.md");
  inspect_cmd->fallthrough();
  inspect_cmd->add_option("file", inspect.file, "a packed binary file (varpack pack -o FILE.bin)")
      ->required();
  inspect_cmd->add_flag("--check", inspect.check,
                        "verify every row, piece, position, label and token id (exit 1 naming the "
                        "first row and piece at fault)");
  inspect_cmd->add_flag("--json", inspect.json, "print one JSON object instead of text");

  CLI::App* calibrate_cmd = app.add_subcommand(
      "calibrate", "Fit a cost model on your model and GPU: runs in Python, as python -m varpack "
      "calibrate");
  calibrate_cmd->allow_extras()->prefix_command();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where;
    for (const CLI::App* sub : {pack_cmd, stats_cmd, inspect_cmd}) {
      if (sub->parsed()) where = sub->get_name() + " ";
    }
    return fail(std::string(e.what()) + "; see 'varpack " + where + "--help'", kBadUsage);
  }
  configure_progress(quiet, progress_every);

  try {
    if (pack_cmd->parsed()) return run_pack(pack);
    if (stats_cmd->parsed()) return run_stats(stats);
    if (inspect_cmd->parsed()) return run_inspect(inspect);
    if (calibrate_cmd->parsed()) {
      return fail("calibrate runs in Python, where your model is: python -m varpack calibrate "
                  "--model pkg.module:factory --capacity 16384 (python -m varpack calibrate --help "
                  "lists its options)",
                  kBadUsage);
    }
    return run_default();
  } catch (const UsageError& e) {
    return fail(e.what(), kBadUsage);
  } catch (const varpack::Error& e) {
    return fail(e.what(), kBadInput);
  } catch (const std::bad_alloc&) {
    return fail("out of memory", kBadInput);
  } catch (const std::exception& e) {
    return fail(std::string("unexpected: ") + e.what(), kBadInput);
  }
}
