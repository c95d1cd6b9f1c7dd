#include <gtest/gtest.h>

#include "common/common.h"

namespace cnlab {
namespace {

Result<int> half(int n) {
  if (n % 2 != 0) return Error::invalid_argument("n", std::to_string(n), "must be even");
  return n / 2;
}

TEST(Result, CarriesValueOrError) {
  auto ok = half(4);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 2);
  auto bad = half(3);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().to_string(), "n \"3\": must be even");
}

TEST(Result, ValueOfAnErrorAbortsWithTheMessage) {
  EXPECT_DEATH((void)half(3).value(), "must be even");
}

TEST(Strings, ParseIntRejectsTrailingGarbageAndNamesTheField) {
  EXPECT_EQ(*parse_int("42", "x"), 42);
  EXPECT_EQ(*parse_int("-7", "x"), -7);
  auto bad = parse_int("4x", "--count");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "--count");
  EXPECT_EQ(bad.error().value, "4x");
  EXPECT_FALSE(parse_int("", "x"));
  EXPECT_FALSE(parse_int("99999999999999999999999", "x"));
}

TEST(Strings, SplitKeepsEmptyParts) {
  auto parts = split("a||b", '|');
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(parts[2], "b");
}

TEST(Time, Rfc3339RoundTripsAndHonoursOffsets) {
  auto t = parse_rfc3339("2026-11-30T14:05:00Z", "deadline");
  ASSERT_TRUE(t);
  EXPECT_EQ(format_rfc3339(*t), "2026-11-30T14:05:00Z");
  auto shifted = parse_rfc3339("2026-11-30T16:05:00+02:00", "deadline");
  ASSERT_TRUE(shifted);
  EXPECT_EQ(*shifted, *t);
  EXPECT_FALSE(parse_rfc3339("2026-02-30T00:00:00Z", "deadline"));
  EXPECT_FALSE(parse_rfc3339("yesterday", "deadline"));
  EXPECT_EQ(parse_rfc3339("2026-11-30", "deadline").error().field, "deadline");
}

TEST(Time, DurationsParseAndPrintInTheirShortestForm) {
  EXPECT_EQ(*parse_duration("1h30m", "d"), Duration{5400});
  EXPECT_EQ(*parse_duration("7d", "d"), 7 * kDay);
  EXPECT_EQ(format_duration(Duration{5400}), "1h30m");
  EXPECT_EQ(format_duration(Duration{0}), "0s");
  EXPECT_FALSE(parse_duration("1x", "d"));
  EXPECT_FALSE(parse_duration("h", "d"));
  EXPECT_FALSE(parse_duration("", "d"));
}

TEST(Time, NearTimesPrintAsClockTimeAndFarOnesWithTheDate) {
  Time now = *parse_rfc3339("2026-11-30T10:00:00Z", "t");
  EXPECT_EQ(format_time_near(now + 4 * kHour + 5 * kMinute, now), "14:05");
  EXPECT_EQ(format_time_near(now + 3 * kDay, now), "2026-12-03 10:00");
}

}  // namespace
}  // namespace cnlab
