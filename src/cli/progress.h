// Progress on stderr for jobs that take more than a moment: on a terminal a one-line bar redrawn
// in place; elsewhere (a log file under Slurm or nohup, a pipe) a line every few seconds with the
// elapsed time and, when the total is known, the estimated time left. Nothing with --quiet, and
// nothing for a job that ends within half a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "varpack/io.h"

namespace varpack::cli {

// From the command line: `quiet` shows nothing; `every_seconds` >= 0 prints lines at that period
// (0: at every update) even on a terminal; < 0 keeps the default (a bar on a terminal, else a line
// every 10 s).
void configure_progress(bool quiet, double every_seconds);

class ProgressBar {
 public:
  // `unit` names what is counted ("bytes" shows MB and MB/s; anything else is shown as is).
  ProgressBar(std::string label, std::string unit);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(uint64_t done, uint64_t total);
  void finish();  // erases the bar if one was drawn
  ProgressFn fn() { return [this](uint64_t done, uint64_t total) { update(done, total); }; }

 private:
  using Clock = std::chrono::steady_clock;
  std::string describe(uint64_t done, uint64_t total, double seconds) const;
  std::string label_, unit_;
  bool drawn_ = false;
  Clock::time_point start_, last_draw_;
};

}  // namespace varpack::cli
