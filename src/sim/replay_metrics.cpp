#include "sim/replay_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/check.h"

namespace cnlab::sim {

double percentile(std::span<const double> sorted, double p) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  double rank = std::ceil(p / 100.0 * static_cast<double>(sorted.size()) - 1e-9);
  size_t index = rank < 1 ? 0 : std::min(sorted.size(), static_cast<size_t>(rank)) - 1;
  return sorted[index];
}

Stats summarize(std::vector<double> values) {
  Stats s;
  s.count = values.size();
  if (values.empty()) {
    s.mean = s.p50 = s.p99 = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  std::sort(values.begin(), values.end());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.p50 = percentile(values, 50);
  s.p99 = percentile(values, 99);
  return s;
}

double jain_index(std::span<const double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0, squares = 0;
  for (double x : values) {
    sum += x;
    squares += x * x;
  }
  if (squares == 0) return 1.0;
  return sum * sum / (static_cast<double>(values.size()) * squares);
}

PowerDownMeter::PowerDownMeter(size_t nodes, Time start, Duration after)
    : after_(after), jobs_(nodes, 0), idle_since_(nodes, start), ever_off_(nodes, 0) {}

void PowerDownMeter::close_idle(uint32_t node, Time at) {
  Duration off = (at - idle_since_[node]) - after_;
  if (off.count() > 0) {
    off_seconds_ += static_cast<double>(off.count());
    ever_off_[node] = 1;
  }
}

void PowerDownMeter::job_started(uint32_t node, Time at) {
  if (jobs_[node]++ == 0) close_idle(node, at);
}

void PowerDownMeter::job_left(uint32_t node, Time at) {
  CNLAB_CHECK(jobs_[node] > 0);
  if (--jobs_[node] == 0) idle_since_[node] = at;
}

void PowerDownMeter::finish(Time end) {
  for (uint32_t n = 0; n < jobs_.size(); ++n) {
    if (jobs_[n] == 0) {
      close_idle(n, end);
      idle_since_[n] = end;
    }
  }
}

uint32_t PowerDownMeter::nodes_on(Time at) const {
  uint32_t on = 0;
  for (uint32_t n = 0; n < jobs_.size(); ++n) on += jobs_[n] > 0 || at - idle_since_[n] < after_ ? 1 : 0;
  return on;
}

size_t PowerDownMeter::nodes_ever_off() const {
  return static_cast<size_t>(std::count(ever_off_.begin(), ever_off_.end(), uint8_t{1}));
}

}  // namespace cnlab::sim
