#include "sim/alloc_measure.h"

#include <gtest/gtest.h>

namespace cnlab::sim {
namespace {

TEST(Measure, RoundsHalfToEven) {
  EXPECT_EQ(divide_round_half_even(1, 2), 0);   // 0.5
  EXPECT_EQ(divide_round_half_even(3, 2), 2);   // 1.5
  EXPECT_EQ(divide_round_half_even(5, 2), 2);   // 2.5
  EXPECT_EQ(divide_round_half_even(7, 2), 4);   // 3.5
  EXPECT_EQ(divide_round_half_even(11, 4), 3);  // 2.75
  EXPECT_EQ(divide_round_half_even(9, 4), 2);   // 2.25
  EXPECT_EQ(divide_round_half_even(0, 7), 0);
}

TEST(Measure, FormatsHundredthsAsTheReferenceDoes) {
  EXPECT_EQ(format_hundredths(9523), "95.23");
  EXPECT_EQ(format_hundredths(9520), "95.2");
  EXPECT_EQ(format_hundredths(100), "1.0");
  EXPECT_EQ(format_hundredths(24), "0.24");
  EXPECT_EQ(format_hundredths(5), "0.05");
  EXPECT_EQ(format_hundredths(kNoValue), "");
}

TEST(Measure, EventsLandInTheBucketOfTheirRoundedArrivedPercent) {
  // C = 200000: x = round(A / 2000), y = round(U / 20) hundredths.
  CurveRecorder r(200000, 5);
  r.record(999, 190);    // x = round(0.4995) = 0; y = 9.5 -> 10 (to even)
  r.record(1000, 210);   // x = round(0.5) = 0 (to even); y = 10.5 -> 10
  r.record(3000, 1030);  // x = round(1.5) = 2; y = 51.5 -> 52
  r.record(5000, 2000);  // x = round(2.5) = 2; y = 100
  r.record(7000, 3000);  // x = round(3.5) = 4; y = 150
  auto curve = r.curve();
  ASSERT_EQ(curve.size(), 6u);
  EXPECT_EQ(curve[0], 10);   // mean(10, 10)
  EXPECT_EQ(curve[1], 43);   // empty: events with x in {0, 2}: (10+10+52+100)/4 = 43
  EXPECT_EQ(curve[2], 76);   // mean(52, 100)
  EXPECT_EQ(curve[3], 101);  // empty: x in {2, 4}: (52+100+150)/3 = 100.67 -> 101
  EXPECT_EQ(curve[4], 150);
  EXPECT_EQ(curve[5], 150);  // empty: x in {4, 6}
}

TEST(Measure, BucketMeansRoundHalfToEven) {
  CurveRecorder r(10000, 3);  // x = round(A / 100), y = U hundredths
  r.record(0, 1);
  r.record(0, 2);  // mean 1.5 -> 2
  r.record(100, 2);
  r.record(100, 3);  // mean 2.5 -> 2
  r.record(200, 3);
  r.record(200, 4);  // mean 3.5 -> 4
  auto curve = r.curve();
  EXPECT_EQ(curve[0], 2);
  EXPECT_EQ(curve[1], 2);
  EXPECT_EQ(curve[2], 4);
  EXPECT_EQ(curve[3], 4);  // empty: only x = 2 neighbours it
}

TEST(Measure, ABucketWithNoEventNearbyHasNoValue) {
  CurveRecorder r(10000, 5);
  r.record(0, 0);
  auto curve = r.curve();
  EXPECT_EQ(curve[1], 0);
  EXPECT_EQ(curve[2], kNoValue);
}

TEST(Measure, MeanOverSeedsSkipsMissingPointsAndRoundsHalfToEven) {
  std::vector<std::vector<int64_t>> curves = {{100, 5, kNoValue}, {101, 6, kNoValue}, {103, 6, kNoValue}};
  // (100+101+103)/3 = 101.33 -> 101; (5+6+6)/3 = 5.67 -> 6
  EXPECT_EQ(mean_curve(curves), (std::vector<int64_t>{101, 6, kNoValue}));
  std::vector<std::vector<int64_t>> two = {{1}, {2}};
  EXPECT_EQ(mean_curve(two)[0], 2);  // 1.5 -> 2
}

}  // namespace
}  // namespace cnlab::sim
