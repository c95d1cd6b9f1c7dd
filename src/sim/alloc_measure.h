// The measurement of the allocation experiment: after every pod, the arrived GPU demand and the
// allocated GPU milli, bucketed by whole percent of arrived demand.
//
// Percentages are kept as integer hundredths (9523 = 95.23%) so that every rounding the
// methodology asks for (half to even, 2 dp) is exact rather than subject to binary fractions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cnlab::sim {

// A curve point with no event to average.
inline constexpr int64_t kNoValue = -1;

// num/den rounded to the nearest integer, ties to even. num >= 0, den > 0.
int64_t divide_round_half_even(int64_t num, int64_t den);

// "95.23", "95.2", "95.0": the shortest form with at least one decimal, as the reference CSV
// writes them; "" for kNoValue.
std::string format_hundredths(int64_t hundredths);

class CurveRecorder {
 public:
  // Buckets 0..max_percent of `gpu_capacity` (C, > 0).
  CurveRecorder(int64_t gpu_capacity, int max_percent);

  // One event: x = round(100*A/C) and y = round(100*U/C, 2), both half to even.
  void record(int64_t arrived_milli, int64_t allocated_milli);

  // For k = 0..max_percent: the mean of y over events with x == k, or where there are none over
  // those with |x-k| <= 1, rounded to 2 dp (half to even); kNoValue when that is empty too.
  std::vector<int64_t> curve() const;

 private:
  int64_t capacity_;
  int max_percent_;
  std::vector<int64_t> sum_;    // of y in hundredths, per x in 0..max_percent+1
  std::vector<int64_t> count_;  // events per x
};

// The point-wise mean of runs' curves (kNoValue points skipped), rounded to 2 dp half to even.
std::vector<int64_t> mean_curve(std::span<const std::vector<int64_t>> curves);

}  // namespace cnlab::sim
