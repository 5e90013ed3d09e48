// A one-line progress bar on stderr for jobs that take more than a moment. It draws nothing when
// stderr is not a terminal (logs and pipes stay clean) or when the job ends within half a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "varpack/io.h"

namespace varpack::cli {

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
  std::string label_, unit_;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_, last_draw_;
};

}  // namespace varpack::cli
