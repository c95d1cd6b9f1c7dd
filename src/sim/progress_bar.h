// A one-line progress bar for long runs: drawn on stderr only when stderr is a terminal, and only
// once the work has lasted a second (short runs stay quiet).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>

namespace cnlab::sim {

class ProgressBar {
 public:
  // Enabled when `stream` is a terminal. `unit` names what update() counts ("runs", "events").
  explicit ProgressBar(std::FILE* stream, const char* unit = "runs");
  void update(size_t done, size_t total);
  // Clears the line if anything was drawn.
  void finish();

 private:
  std::FILE* stream_;
  const char* unit_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace cnlab::sim
