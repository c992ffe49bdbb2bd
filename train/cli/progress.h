// A progress bar on stderr for work counted in units (runs of a demo, the run and its
// reference for train). It appears only when stderr is a terminal, the caller did not ask
// for --quiet, and the work has taken more than a second; it is erased when done, so that
// stdout (the tables) is never interleaved with it.
//
// Thread safety: advance() and the destructor are called by the owning thread; a private
// render thread reads the state under a mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace dtsim::cli {

class Progress {
 public:
  // `total` units of work; `enabled` false (--quiet) draws nothing.
  Progress(int total, bool enabled);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress();

  // Starts unit `label` (the previous one is done).
  void advance(const std::string& label);
  // Within the current unit: `done` of `total` training steps (any thread may call it).
  void set_steps(int done, int total);
  // Prints `line` and a newline on stdout now, erasing the bar first (it is redrawn on its
  // next tick), so that results appear as they are made (any thread may call it).
  void print_line(const std::string& line);

 private:
  void render_loop();
  void draw();

  const int total_;
  int done_ = -1;
  int steps_done_ = 0, steps_total_ = 0;
  std::string label_;
  const std::chrono::steady_clock::time_point start_;
  bool stop_ = false, drawn_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace dtsim::cli
