// Priority tiers and fair share: who goes first when there is room for only some.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fixtures.h"

namespace cnlab::sched {
namespace {

using namespace testing;

// One GPU with room for one whole-GPU job: whoever is placed went first.
JobIndex winner(const Snapshot& s, const PolicyConfig& config = {}) {
  auto r = run_cycle(s, config);
  EXPECT_EQ(r.placements.size(), 1u);
  return r.placements.empty() ? UINT32_MAX : r.placements[0].job;
}

TEST(PriorityTiers, InferenceGoesBeforeDevWhateverTheAge) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {pending_job("old-dev", "h100", {.priority_class = "dev", .submitted_ago = 10 * kDay}),
                        pending_job("new-inference", "h100", {.priority_class = "inference"})});
  EXPECT_EQ(winner(s), 1u);
}

TEST(PriorityTiers, TiersAreConfigurable) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)}, {pending_job("x", "h100", {.priority_class = "batch"}),
                                                    pending_job("y", "h100", {.priority_class = "urgent"})});
  auto config = *policy_config_from_json(Json::parse(R"({"tiers": [{"name": "urgent"}, {"name": "batch"}]})"));
  EXPECT_EQ(winner(s, config), 1u);
}

TEST(PriorityTiers, UnknownClassIsWarnedAboutAndTreatedAsLowest) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)}, {pending_job("x", "h100", {.priority_class = "vip"}),
                                                    pending_job("y", "h100", {.priority_class = "opportunistic"})});
  auto r = run_cycle(s, {});
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_THAT(r.warnings[0], ::testing::HasSubstr("unknown priority class \"vip\""));
}

TEST(PriorityTiers, OldestFirstInsideATeam) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)}, {pending_job("newer", "h100", {.submitted_ago = kMinute}),
                                                    pending_job("older", "h100", {.submitted_ago = kHour})});
  EXPECT_EQ(winner(s), 1u);
}

TEST(FairShare, TeamThatRanHeavyYesterdayYieldsToStarvedTeamToday) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {pending_job("vision-job", "h100", {.project = "vision", .submitted_ago = kDay}),
                        pending_job("nlp-job", "h100", {.project = "nlp", .submitted_ago = kMinute})});
  s.usage.add("vision", "alice", /*block_seconds=*/100.0 * 86400, s.now - kDay);
  EXPECT_EQ(winner(s), 1u);
}

TEST(FairShare, UsageFadesWithTheHalfLife) {
  UsageLedger ledger(kDay);
  ledger.add("vision", "alice", 1000, t0());
  EXPECT_DOUBLE_EQ(ledger.project_usage("vision", t0() + kDay), 500);
  EXPECT_DOUBLE_EQ(ledger.project_usage("vision", t0() + 2 * kDay), 250);
  EXPECT_DOUBLE_EQ(ledger.user_usage("vision", "alice", t0() + kDay), 500);
  EXPECT_DOUBLE_EQ(ledger.project_usage("nlp", t0()), 0);
}

TEST(FairShare, LargerShareBuysMoreBeforeYielding) {
  // vision used twice what nlp did, but holds three times the share: it still goes first.
  auto s = snapshot_of({gpu_node("a", "h100", 1)}, {pending_job("nlp-job", "h100", {.project = "nlp"}),
                                                    pending_job("vision-job", "h100", {.project = "vision"})});
  s.usage.add("vision", "alice", 2000, s.now);
  s.usage.add("nlp", "bob", 1000, s.now);
  s.projects = {{{"vision", "", {}, 0}, 3.0, {}}, {{"nlp", "", {}, 0}, 1.0, {}}};
  EXPECT_EQ(winner(s), 1u);
}

TEST(FairShare, StarvedTeamsAlternateInsideOneCycle) {
  // Two teams with no history and four one-GPU jobs each, four GPUs: two each, not four to one.
  std::vector<model::Job> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(pending_job("a" + std::to_string(i), "h100", {.project = "alpha", .submitted_ago = kDay}));
    jobs.push_back(pending_job("b" + std::to_string(i), "h100", {.project = "beta", .submitted_ago = kMinute}));
  }
  auto r = run_cycle(snapshot_of({gpu_node("n", "h100", 4)}, jobs), {});
  ASSERT_EQ(r.placements.size(), 4u);
  int alpha = 0;
  for (const auto& p : r.placements) alpha += jobs[p.job].spec.project == "alpha" ? 1 : 0;
  EXPECT_EQ(alpha, 2);
}

TEST(FairShare, RunningWorkCountsAgainstATeam) {
  // nlp already holds 3 GPUs; vision none. With equal history, vision's job goes first.
  auto s = snapshot_of({gpu_node("n", "h100", 4)},
                       {running_job("n0", "h100", "n", {whole_gpu(0)}, kMinute, {.project = "nlp"}),
                        running_job("n1", "h100", "n", {whole_gpu(1)}, kMinute, {.project = "nlp"}),
                        running_job("n2", "h100", "n", {whole_gpu(2)}, kMinute, {.project = "nlp"}),
                        pending_job("nlp-more", "h100", {.project = "nlp", .submitted_ago = kDay}),
                        pending_job("vision-first", "h100", {.project = "vision"})});
  EXPECT_EQ(winner(s), 4u);
}

TEST(FairShare, UsersInsideAProjectShareToo) {
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {pending_job("heavy-user", "h100", {.user = "alice", .submitted_ago = kDay}),
                        pending_job("light-user", "h100", {.user = "bob"})});
  s.usage.add("vision", "alice", 5000, s.now);
  EXPECT_EQ(winner(s), 1u);
}

// Inside one user's jobs of a tier, the tier's order decides. Dev's is the response ratio
// (wait + estimate) / estimate: highest first.
TEST(ResponseRatio, AShortDevJobPassesALongOneItsUserSubmittedJustBefore) {
  // long: (1h + 3d) / 3d = 1.01; short: (10m + 10m) / 10m = 2.
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {pending_job("long", "h100", {.submitted_ago = kHour, .estimate = 3 * kDay}),
                        pending_job("short", "h100", {.submitted_ago = 10 * kMinute, .estimate = 10 * kMinute})});
  EXPECT_EQ(winner(s), 1u);
}

TEST(ResponseRatio, ALongJobThatHasWaitedLongGoesFirstAtLast) {
  // long: (3d + 1d) / 1d = 4; short: (1m + 1m) / 1m = 2. No job starves.
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {pending_job("long", "h100", {.submitted_ago = 3 * kDay, .estimate = kDay}),
                        pending_job("short", "h100", {.submitted_ago = kMinute, .estimate = kMinute})});
  EXPECT_EQ(winner(s), 0u);
}

TEST(ResponseRatio, ProductionKeepsOldestFirstByDefault) {
  auto s = snapshot_of(
      {gpu_node("a", "h100", 1)},
      {pending_job("long", "h100", {.priority_class = "production", .submitted_ago = kHour, .estimate = 3 * kDay}),
       pending_job("short", "h100",
                   {.priority_class = "production", .submitted_ago = 10 * kMinute, .estimate = 10 * kMinute})});
  EXPECT_EQ(winner(s), 0u);
  auto config = *policy_config_from_json(Json::parse(R"({"tiers": [{"name": "production", "order": "response_ratio"}]})"));
  EXPECT_EQ(winner(s, config), 1u);
}

TEST(ResponseRatio, AJobWithoutAnEstimateCountsAsTheDefaultEstimate) {
  // With the 1-day default: unknown (2h + 1d) / 1d = 1.08 < estimated (1h + 2h) / 2h = 1.5.
  // With a 1-hour default: unknown (2h + 1h) / 1h = 3 goes first.
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {pending_job("unknown", "h100", {.submitted_ago = 2 * kHour}),
                        pending_job("estimated", "h100", {.submitted_ago = kHour, .estimate = 2 * kHour})});
  EXPECT_EQ(winner(s), 1u);
  auto config = *policy_config_from_json(Json::parse(R"({"default_estimate": "1h"})"));
  EXPECT_EQ(winner(s, config), 0u);
}

TEST(ResponseRatio, FairShareStillDecidesBetweenUsers) {
  // bob's short job has the higher ratio, but bob ran heavily: alice goes first.
  auto s = snapshot_of({gpu_node("a", "h100", 1)},
                       {pending_job("alice-long", "h100", {.user = "alice", .submitted_ago = kHour, .estimate = 3 * kDay}),
                        pending_job("bob-short", "h100", {.user = "bob", .estimate = kMinute})});
  s.usage.add("vision", "bob", 5000, s.now);
  EXPECT_EQ(winner(s), 0u);
}

TEST(ResponseRatio, TheOrderIsReadCheckedAndWritten) {
  auto config = policy_config_from_json(
      Json::parse(R"({"tiers": [{"name": "a", "order": "response_ratio"}, {"name": "b"}], "default_estimate": "6h"})"));
  ASSERT_TRUE(config) << config.error().to_string();
  EXPECT_EQ(config->tiers[0].order, QueueOrder::kResponseRatio);
  EXPECT_EQ(config->tiers[1].order, QueueOrder::kSubmitted);
  auto back = policy_config_from_json(to_json(*config));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->tiers[0].order, QueueOrder::kResponseRatio);
  EXPECT_EQ(back->tiers[1].order, QueueOrder::kSubmitted);
  EXPECT_EQ(back->default_estimate, 6 * kHour);
  EXPECT_EQ(PolicyConfig{}.tiers[PolicyConfig{}.tier_index("dev")].order, QueueOrder::kResponseRatio);

  auto bad = policy_config_from_json(Json::parse(R"({"tiers": [{"name": "a", "order": "shortest"}]})"));
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().to_string(), ::testing::HasSubstr("tiers[0].order"));
  EXPECT_THAT(bad.error().to_string(), ::testing::HasSubstr("shortest"));
  EXPECT_THAT(bad.error().to_string(), ::testing::HasSubstr("response_ratio"));
  auto zero = policy_config_from_json(Json::parse(R"({"default_estimate": "0s"})"));
  ASSERT_FALSE(zero);
  EXPECT_THAT(zero.error().to_string(), ::testing::HasSubstr("default_estimate"));
}

}  // namespace
}  // namespace cnlab::sched
