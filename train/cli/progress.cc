#include "train/cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace dtsim::cli {

Progress::Progress(int total, bool enabled)
    : total_(std::max(total, 1)), start_(std::chrono::steady_clock::now()) {
  if (enabled && isatty(STDERR_FILENO)) thread_ = std::thread([this] { render_loop(); });
}

Progress::~Progress() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (drawn_) std::fprintf(stderr, "\r\033[K");  // erase the bar
}

void Progress::advance(const std::string& label) {
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  label_ = label;
  steps_done_ = steps_total_ = 0;
}

void Progress::set_steps(int done, int total) {
  std::lock_guard<std::mutex> lock(mu_);
  steps_done_ = done;
  steps_total_ = total;
}

void Progress::print_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void Progress::render_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (stop_) break;
    if (std::chrono::steady_clock::now() - start_ < std::chrono::seconds(1)) continue;
    draw();
  }
}

// Called with mu_ held: "[#########.........] 3/14  ddp mlp  step 120/200  4.2 s"; the bar
// counts units and the steps of the current unit as a fraction of one.
void Progress::draw() {
  constexpr int kWidth = 30;
  const int done = std::clamp(done_, 0, total_);
  const double step_part = steps_total_ > 0 ? double(steps_done_) / steps_total_ : 0.0;
  const int filled = std::clamp(static_cast<int>((done + step_part) * kWidth / total_), 0, kWidth);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  std::string steps;
  if (steps_total_ > 0) {
    steps = "  step " + std::to_string(steps_done_) + "/" + std::to_string(steps_total_);
  }
  std::fprintf(stderr, "\r\033[K[%s] %d/%d  %s%s  %.1f s", bar.c_str(), done, total_,
               label_.c_str(), steps.c_str(), secs);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace dtsim::cli
