// ProgressBar: redraws "\r<label> [####    ]  45%  120 MB/s" at most ten times a second.
#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace varpack::cli {
namespace {
constexpr auto kQuietPeriod = std::chrono::milliseconds(500);
constexpr auto kRedrawPeriod = std::chrono::milliseconds(100);
constexpr int kBarWidth = 30;
}  // namespace

ProgressBar::ProgressBar(std::string label, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), enabled_(::isatty(STDERR_FILENO) == 1),
      start_(Clock::now()), last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (now - start_ < kQuietPeriod || (drawn_ && now - last_draw_ < kRedrawPeriod)) return;
  last_draw_ = now;
  drawn_ = true;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const bool bytes = unit_ == "bytes";
  const double shown = bytes ? static_cast<double>(done) / 1e6 : static_cast<double>(done);
  const char* unit = bytes ? "MB" : unit_.c_str();
  if (total > 0) {
    const double fraction = static_cast<double>(done) / static_cast<double>(total);
    const int filled = static_cast<int>(fraction * kBarWidth);
    std::fprintf(stderr, "\r%s [%s%s] %3d%%  %.0f %s/s ", label_.c_str(),
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kBarWidth - filled), ' ').c_str(),
                 static_cast<int>(fraction * 100), shown / seconds, unit);
  } else {
    std::fprintf(stderr, "\r%s %.0f %s  %.0f %s/s ", label_.c_str(), shown, unit,
                 shown / seconds, unit);
  }
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (!drawn_) return;
  // Spaces over the whole bar, then back to the start of the line.
  std::fprintf(stderr, "\r%s\r", std::string(label_.size() + kBarWidth + 40, ' ').c_str());
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace varpack::cli
