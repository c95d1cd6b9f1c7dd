#include "sim/alloc_measure.h"

#include <fmt/format.h>

#include "common/check.h"

namespace cnlab::sim {

int64_t divide_round_half_even(int64_t num, int64_t den) {
  CNLAB_CHECK(num >= 0 && den > 0);
  int64_t q = num / den;
  int64_t twice_rest = 2 * (num % den);
  if (twice_rest > den || (twice_rest == den && q % 2 == 1)) ++q;
  return q;
}

std::string format_hundredths(int64_t hundredths) {
  if (hundredths == kNoValue) return "";
  int64_t whole = hundredths / 100, rest = hundredths % 100;
  if (rest % 10 == 0) return fmt::format("{}.{}", whole, rest / 10);
  return fmt::format("{}.{:02}", whole, rest);
}

CurveRecorder::CurveRecorder(int64_t gpu_capacity, int max_percent)
    : capacity_(gpu_capacity),
      max_percent_(max_percent),
      sum_(static_cast<size_t>(max_percent) + 2),
      count_(static_cast<size_t>(max_percent) + 2) {
  CNLAB_CHECK(gpu_capacity > 0 && max_percent >= 0);
}

void CurveRecorder::record(int64_t arrived_milli, int64_t allocated_milli) {
  int64_t x = divide_round_half_even(100 * arrived_milli, capacity_);
  // Events past the last bucket only matter as the |x-k| <= 1 neighbours of the last one.
  if (x > max_percent_ + 1) return;
  sum_[static_cast<size_t>(x)] += divide_round_half_even(10000 * allocated_milli, capacity_);
  ++count_[static_cast<size_t>(x)];
}

std::vector<int64_t> CurveRecorder::curve() const {
  std::vector<int64_t> out(static_cast<size_t>(max_percent_) + 1, kNoValue);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t sum = sum_[k], count = count_[k];
    if (count == 0) {
      if (k > 0) sum += sum_[k - 1], count += count_[k - 1];
      sum += sum_[k + 1], count += count_[k + 1];
    }
    if (count > 0) out[k] = divide_round_half_even(sum, count);
  }
  return out;
}

std::vector<int64_t> mean_curve(std::span<const std::vector<int64_t>> curves) {
  if (curves.empty()) return {};
  std::vector<int64_t> out(curves[0].size(), kNoValue);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t sum = 0, count = 0;
    for (const auto& c : curves) {
      if (k < c.size() && c[k] != kNoValue) sum += c[k], ++count;
    }
    if (count > 0) out[k] = divide_round_half_even(sum, count);
  }
  return out;
}

}  // namespace cnlab::sim
