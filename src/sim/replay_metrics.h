// The replay's measures that are pure arithmetic, kept apart so tests can check them on inputs
// worked out by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/time.h"

namespace cnlab::sim {

// Nearest-rank percentile of `sorted` (ascending): the smallest value such that at least p % of
// the values are <= it, i.e. sorted[ceil(p/100 * n) - 1] (p = 0 gives the minimum). NaN when
// empty. Always one of the values, never an interpolation between two.
double percentile(std::span<const double> sorted, double p);

struct Stats {
  size_t count = 0;
  double mean = 0, p50 = 0, p99 = 0;  // NaN when count == 0
};
Stats summarize(std::vector<double> values);

// Jain's fairness index (sum x)^2 / (n * sum x^2) over n >= 1 values >= 0: 1 when all are
// equal, 1/n when one value has everything. NaN for no values; 1 when all are zero.
double jain_index(std::span<const double> values);

// Which nodes could have been powered down, and for how long: a node with no job for longer than
// `after` could have been off for the rest of that idle stretch (booting is taken as instant). Each
// idle stretch of length L counts max(0, L - after). Nodes start idle at `start`.
class PowerDownMeter {
 public:
  PowerDownMeter(size_t nodes, Time start, Duration after);

  void job_started(uint32_t node, Time at);
  void job_left(uint32_t node, Time at);
  // Ends every open idle stretch at `end` (call once, last).
  void finish(Time end);

  bool idle(uint32_t node) const { return jobs_[node] == 0; }
  Time idle_since(uint32_t node) const { return idle_since_[node]; }
  // Nodes that must be on at `at`: running something, or idle for less than `after`.
  uint32_t nodes_on(Time at) const;
  // Node-seconds during which some node could have been off, over stretches closed so far.
  double off_seconds() const { return off_seconds_; }
  // Nodes with at least one such stretch.
  size_t nodes_ever_off() const;

 private:
  void close_idle(uint32_t node, Time at);

  Duration after_;
  std::vector<uint32_t> jobs_;
  std::vector<Time> idle_since_;
  std::vector<uint8_t> ever_off_;
  double off_seconds_ = 0;
};

}  // namespace cnlab::sim
