// `varpack`: the command line on the library. Parses arguments with CLI11 and runs a subcommand;
// with no arguments it runs the embedded default. Every error, ours or the parser's, becomes one
// line "varpack: error: ..." on stderr and a non-zero exit status (1 bad input, 2 bad usage).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "varpack/cost_model.h"
#include "varpack/error.h"

namespace {

int fail(const std::string& message, int status) {
  std::fprintf(stderr, "varpack: error: %s\n", message.c_str());
  return status;
}

// The inputs both commands take (dispatched in input.cpp).
constexpr const char* kInputHelp =
    "JSONL file; DATA.npy (flat token ids: int32, int64, uint16 or uint32) with its int64 sample "
    "offsets in DATA.offsets.npy beside it (n + 1 values from 0); a Megatron-LM indexed dataset as "
    "PREFIX.bin (with PREFIX.idx) or megatron:PREFIX; a Parquet or Arrow IPC / Feather file, a "
    "Hugging Face datasets save_to_disk folder or a folder of .parquet / .arrow files (--column); "
    "or profile:NAME for a generated length profile";
constexpr const char* kColumnHelp =
    "for Parquet / Arrow input: the column holding each sample's list of token ids";

}  // namespace

int main(int argc, char** argv) {
  using namespace varpack::cli;
  CLI::App app{"varpack: sequence packing for padding-free transformer training.\n"
               "With no arguments, packs the embedded default (the report's length profile) and "
               "shows what packing saves.",
               "varpack"};
  app.require_subcommand(0, 1);

  PackArgs pack;
  CLI::App* pack_cmd = app.add_subcommand(
      "pack", "Pack the samples of a JSONL file (one {\"input_ids\": [...]} per line), a .npy token file "
      "or a Megatron dataset into rows");
  pack_cmd->add_option("input", pack.input, kInputHelp)
      ->required();
  pack_cmd->add_option("--capacity,-L", pack.capacity, "tokens per row (L > 0)")->required();
  pack_cmd->add_option("--out,-o", pack.out, "output file; a .bin name selects the binary format")
      ->required();
  pack_cmd->add_option("--algorithm,-a", pack.algorithm,
                       "ffd | bfd | histogram | none (one sample per row) | dynamic (batches "
                       "padded to their longest)")
      ->capture_default_str();
  pack_cmd->add_option("--overlong", pack.overlong,
                       "samples longer than L: error | truncate | split")
      ->capture_default_str();
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
      ->capture_default_str();
  pack_cmd->add_option("--format", pack.format,
                       "jsonl | bin (default: bin if --out ends in .bin, else jsonl)");
  pack_cmd->add_flag("--check", pack.check,
                     "read the written file back and verify every token, position, label and "
                     "cu_seqlens against the input before renaming it into place");
  pack_cmd->add_option("--report", pack.report,
                       "also write a JSON report (samples, tokens, rows, padding, seconds, ...)");
  pack_cmd->add_option("--image-token-id", pack.image_token_id,
                       "for JSONL records with \"images\": the token id of the image placeholders "
                       "(one per patch, before the record's text, label -100)");

  StatsArgs stats;
  const varpack::CostModel default_model;
  stats.alpha = default_model.alpha;
  stats.beta = default_model.beta;
  CLI::App* stats_cmd = app.add_subcommand(
      "stats",
      "Length histogram and, side by side, padding and predicted compute of fixed padding to L, "
      "padding to the longest sample, dynamic padding and packing");
  stats_cmd->add_option("input", stats.input, kInputHelp)
      ->required();
  stats_cmd->add_option("--capacity,-L", stats.capacity, "tokens per row (L > 0)")->required();
  stats_cmd->add_option("--column", stats.column, kColumnHelp)->capture_default_str();
  stats_cmd->add_option("--alpha", stats.alpha,
                        "cost per token (seconds; default: the 542M-model fit of ANCHORS.md)")
      ->capture_default_str();
  stats_cmd->add_option("--beta", stats.beta,
                        "cost per token^2 of one sample's attention (seconds; same fit)")
      ->capture_default_str();
  stats_cmd->add_option("--cost-model", stats.cost_model,
                        "a cost model fitted on your model and GPU (JSON from `python -m varpack "
                        "calibrate`): its alpha, beta and per-row overhead replace --alpha/--beta");
  stats_cmd->add_option("--batch-size,-B", stats.batch_size,
                        "samples per batch for the dynamic padding baseline")
      ->capture_default_str();
  stats_cmd->add_option("--algorithm,-a", stats.algorithm, "packer for the packed line: ffd | bfd | histogram")
      ->capture_default_str();
  stats_cmd->add_option("--overlong", stats.overlong,
                        "samples longer than L: error | truncate | split")
      ->capture_default_str();
  stats_cmd->footer(
      "Cost model: a sample (or padded row) of n tokens costs alpha*n + beta*n^2, and each row a "
      "fixed overhead c (0 unless --cost-model gives one). Padded strategies pay it on the padded "
      "width; packing with varlen attention pays it per sample.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string where = pack_cmd->parsed() ? "pack" : stats_cmd->parsed() ? "stats" : "";
    return fail(std::string(e.what()) + "; see 'varpack " + where + (where.empty() ? "" : " ") +
                    "--help'",
                2);
  }

  try {
    if (pack_cmd->parsed()) return run_pack(pack);
    if (stats_cmd->parsed()) return run_stats(stats);
    return run_default();
  } catch (const varpack::Error& e) {
    return fail(e.what(), 1);
  } catch (const std::bad_alloc&) {
    return fail("out of memory", 1);
  } catch (const std::exception& e) {
    return fail(std::string("unexpected: ") + e.what(), 1);
  }
}
