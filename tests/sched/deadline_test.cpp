// Deadlines and the capacity calendar: reservations forward in time, backfill that never delays
// them, pre-emption when a deadline needs it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fixtures.h"

namespace cnlab::sched {
namespace {

using namespace testing;
using ::testing::HasSubstr;

// A 1-GPU node busy for another hour with a dev job.
Snapshot busy_for_an_hour() {
  return snapshot_of({gpu_node("a", "h100", 1)},
                     {running_job("busy", "h100", "a", {whole_gpu(0)}, kHour, {.estimate = 2 * kHour})});
}

TEST(Deadline, FeasibleDeadlineGetsAReservationAtTheEarliestStart) {
  auto s = busy_for_an_hour();
  s.jobs.push_back(pending_job("due", "h100", {.estimate = kHour, .deadline = t0() + 3 * kHour}));
  auto r = run_cycle(s, {});
  ASSERT_EQ(r.reservations.size(), 1u);
  EXPECT_EQ(r.reservations[0].start, t0() + kHour);
  EXPECT_TRUE(r.reservations[0].meets_deadline);
  EXPECT_THAT(r.reason_for(1), HasSubstr("reserved to start at 11:00 on node a"));
  EXPECT_TRUE(r.preemptions.empty()) << "waiting meets the deadline; nothing is evicted";
}

TEST(Deadline, InfeasibleDeadlineIsReportedAsSuch) {
  auto s = busy_for_an_hour();
  // Same tier as the running job: no pre-emption is possible; 11:00 + 2h misses a 12:00 deadline.
  s.jobs.push_back(pending_job("too-late", "h100", {.estimate = 2 * kHour, .deadline = t0() + 2 * kHour}));
  auto r = run_cycle(s, {});
  ASSERT_EQ(r.reservations.size(), 1u);
  EXPECT_FALSE(r.reservations[0].meets_deadline);
  EXPECT_THAT(r.reason_for(1), HasSubstr("deadline 12:00 cannot be met: needs 2h and the earliest start is 11:00"));
}

TEST(Deadline, DeadlineThatNeedsItPreemptsLowerPriorityWork) {
  auto s = busy_for_an_hour();
  s.jobs[0].spec.priority_class = "opportunistic";
  s.jobs.push_back(pending_job("due", "h100",
                               {.priority_class = "dev", .estimate = 2 * kHour, .deadline = t0() + 2 * kHour}));
  auto r = run_cycle(s, {});
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, 0u);
  const Placement* p = placement_of(r, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->after_preempting, std::vector<JobIndex>{0});
}

TEST(Deadline, UrgentDeadlineGoesFirstInItsTier) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {pending_job("old", "h100", {.submitted_ago = kDay}),
                        pending_job("due-soon", "h100", {.estimate = kHour, .deadline = t0() + 90 * kMinute})});
  auto r = run_cycle(s, {});
  EXPECT_TRUE(placed(r, 1));
  EXPECT_FALSE(placed(r, 0));
}

TEST(Backfill, ShortJobStartsInTheHoleBeforeAReservation) {
  // Two GPUs: one free now, one busy for an hour. The 2-GPU deadline job is reserved at 11:00;
  // a 30-minute 1-GPU job fits before it, a job without an estimate does not.
  auto s = snapshot_of({gpu_node("a", "h100", 2)},
                       {running_job("busy", "h100", "a", {whole_gpu(0)}, kHour, {.estimate = 2 * kHour}),
                        pending_job("big", "h100x2", {.submitted_ago = kDay, .estimate = kHour,
                                                      .deadline = t0() + 4 * kHour}),
                        pending_job("short", "h100", {.estimate = 30 * kMinute}),
                        pending_job("open-ended", "h100", {.submitted_ago = kHour})});
  auto r = run_cycle(s, {});
  ASSERT_EQ(r.reservations.size(), 1u);
  EXPECT_EQ(r.reservations[0].job, 1u);
  EXPECT_TRUE(placed(r, 2)) << r.reason_for(2);
  EXPECT_FALSE(placed(r, 3));
  EXPECT_THAT(r.reason_for(3), HasSubstr("reserved for job big from 11:00"));
}

TEST(Backfill, OffMeansNothingPassesABlockedJob) {
  auto s = snapshot_of({gpu_node("a", "h100", 2)},
                       {running_job("busy", "h100", "a", {whole_gpu(0)}, kHour, {.estimate = 2 * kHour}),
                        pending_job("big", "h100x2", {.submitted_ago = kDay}),
                        pending_job("short", "h100", {.estimate = 30 * kMinute})});
  PolicyConfig config;
  config.backfill = false;
  auto r = run_cycle(s, config);
  EXPECT_FALSE(placed(r, 2));
  EXPECT_THAT(r.reason_for(2), HasSubstr("waits behind job big"));
}

TEST(Backfill, TopBlockedJobIsReservedSoSmallJobsCannotStarveIt) {
  auto s = snapshot_of({gpu_node("a", "h100", 2)},
                       {running_job("busy", "h100", "a", {whole_gpu(0)}, kHour, {.estimate = 2 * kHour}),
                        pending_job("big", "h100x2", {.submitted_ago = kDay}),
                        pending_job("small", "h100", {})});
  auto r = run_cycle(s, {});
  ASSERT_EQ(r.reservations.size(), 1u);
  EXPECT_EQ(r.reservations[0].job, 1u);
  EXPECT_FALSE(placed(r, 2)) << "an open-ended small job would delay the reservation";
}

}  // namespace
}  // namespace cnlab::sched
