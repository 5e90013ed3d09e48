// ProgressBar: redraws "\r<label> [####    ]  45%  120 MB/s" at most ten times a second on a
// terminal, or prints "varpack: <label>: 45% (120 MB of 270 MB), 12 s elapsed, about 15 s left".
#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace varpack::cli {
namespace {

constexpr auto kQuietPeriod = std::chrono::milliseconds(500);
constexpr auto kRedrawPeriod = std::chrono::milliseconds(100);
constexpr double kDefaultLinePeriodSeconds = 10;
constexpr int kBarWidth = 30;

enum class Style { none, bar, lines };
Style g_style = Style::none;
double g_line_period = kDefaultLinePeriodSeconds;
bool g_configured = false;

Style style() {
  if (!g_configured) configure_progress(false, -1);
  return g_style;
}

}  // namespace

void configure_progress(bool quiet, double every_seconds) {
  g_configured = true;
  if (quiet) {
    g_style = Style::none;
  } else if (every_seconds >= 0 || ::isatty(STDERR_FILENO) != 1) {
    g_style = Style::lines;
    g_line_period = every_seconds >= 0 ? every_seconds : kDefaultLinePeriodSeconds;
  } else {
    g_style = Style::bar;
  }
}

ProgressBar::ProgressBar(std::string label, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), start_(Clock::now()), last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

std::string ProgressBar::describe(uint64_t done, uint64_t total, double seconds) const {
  const bool bytes = unit_ == "bytes";
  const double scale = bytes ? 1e-6 : 1;
  const char* unit = bytes ? "MB" : unit_.c_str();
  char text[256];
  if (total > 0) {
    const double fraction = static_cast<double>(done) / static_cast<double>(total);
    const double left = fraction > 0 ? seconds * (1 - fraction) / fraction : 0;
    std::snprintf(text, sizeof(text), "%s: %d%% (%.0f of %.0f %s), %.0f s elapsed, about %.0f s left",
                  label_.c_str(), static_cast<int>(fraction * 100), static_cast<double>(done) * scale,
                  static_cast<double>(total) * scale, unit, seconds, left);
  } else {
    std::snprintf(text, sizeof(text), "%s: %.0f %s, %.0f s elapsed", label_.c_str(),
                  static_cast<double>(done) * scale, unit, seconds);
  }
  return text;
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  const Style s = style();
  if (s == Style::none) return;
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (s == Style::lines) {
    const double since = std::chrono::duration<double>(now - last_draw_).count();
    if (since < g_line_period) return;
    last_draw_ = now;
    std::fprintf(stderr, "varpack: %s\n", describe(done, total, seconds).c_str());
    std::fflush(stderr);
    return;
  }
  if (now - start_ < kQuietPeriod || (drawn_ && now - last_draw_ < kRedrawPeriod)) return;
  last_draw_ = now;
  drawn_ = true;
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
