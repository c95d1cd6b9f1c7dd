// The interception library's log: one line per event, `cnlab-vgpu[PID] level: text key=value`, to
// stderr or CNLAB_VGPU_LOG_FILE. Formatting happens on the caller's stack and the line is one
// write(2), so it is safe from any thread; it is only ever called off the hot path (attach, a
// refusal, a denial), and repeated refusals are thinned out by `should_log`.
#pragma once

#include <atomic>
#include <cstdint>

#include "vgpu/config.h"

namespace cnlab::vgpu {

void log_init(const Config& config);
void log_line(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// True for the 1st-10th event of a kind, then for every 1000th (the caller counts in `counter`).
inline bool should_log(std::atomic<uint64_t>& counter) {
  uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  return n < 10 || n % 1000 == 0;
}

}  // namespace cnlab::vgpu
