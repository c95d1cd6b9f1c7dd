// Drains for power-down: with no job waiting for room, the cycle moves every job off a lightly used
// node onto nodes that are busy anyway, so that the node goes idle and can power down.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "fixtures.h"

namespace cnlab::sched {
namespace {

using namespace testing;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

PolicyConfig with_drains(int per_cycle = 4) {
  PolicyConfig config;
  config.max_migrations_per_cycle = 8;
  config.max_drain_moves_per_cycle = per_cycle;
  config.migrate_gpu_jobs = true;
  return config;
}

JobOptions movable(JobOptions o = {}) {
  o.checkpointable = true;
  return o;
}

std::vector<JobIndex> moved(const CycleResult& r) {
  std::vector<JobIndex> v;
  for (const auto& m : r.migrations) v.push_back(m.job);
  return v;
}

std::string node_of_move(const Snapshot& s, const Migration& m) { return s.nodes[m.to.at(0).node].meta.name; }

// Running jobs on `node` in `s`.
size_t jobs_on(const Snapshot& s, const std::string& node) {
  size_t n = 0;
  for (const auto& job : s.jobs) {
    if (job.status.phase != model::JobPhase::kRunning) continue;
    for (const auto& b : job.status.placement) n += b.node == node ? 1 : 0;
  }
  return n;
}

// Node a: four H100s, two taken by jobs that cannot move; node b: one movable job; node c: idle.
Snapshot light_b(JobOptions b_job = movable()) {
  return snapshot_of({gpu_node("a", "h100", 4), gpu_node("b", "h100", 4), gpu_node("c", "h100", 4)},
                     {running_job("a0", "h100", "a", {whole_gpu(0)}, kHour),
                      running_job("a1", "h100", "a", {whole_gpu(1)}, kHour),
                      running_job("b0", "h100", "b", {whole_gpu(2)}, kHour, b_job)});
}

TEST(Drain, ALightlyUsedNodeIsEmptiedOntoABusyNodeAndThenPowersDown) {
  Snapshot s = light_b();
  CycleResult r = run_cycle(s, with_drains());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{2});
  const Migration& m = r.migrations[0];
  EXPECT_EQ(m.reason, MoveReason::kDrain);
  EXPECT_EQ(node_of_move(s, m), "a");  // busy already, never the idle c
  EXPECT_EQ(m.pause, std::chrono::milliseconds(1000));
  EXPECT_TRUE(r.placements.empty());

  apply_decisions(r, s);
  EXPECT_EQ(capacity_violation(s), "");
  EXPECT_EQ(jobs_on(s, "b"), 0u);
  EXPECT_EQ(jobs_on(s, "a"), 3u);
  ASSERT_FALSE(s.jobs[2].status.events.empty());
  EXPECT_EQ(s.jobs[2].status.events.back().type, model::JobEventType::kMigrated);
  EXPECT_EQ(s.jobs[2].status.events.back().reason, "moved to empty node b for power-down");

  // The caller marks b idle when its last job leaves; past power_down_after it is a candidate, and
  // nothing moves again (the mover is in its cooldown, a's other jobs cannot move).
  s.nodes[1].idle_since = s.now;
  s.now += 31 * kMinute;
  CycleResult later = run_cycle(s, with_drains());
  EXPECT_TRUE(later.migrations.empty());
  std::set<std::string> off;
  for (const auto& p : later.power_down) off.insert(s.nodes[p.node].meta.name);
  EXPECT_TRUE(off.count("b"));
}

TEST(Drain, NothingDrainsUnlessTheConfigurationAllowsIt) {
  PolicyConfig room_only = with_drains();
  room_only.max_drain_moves_per_cycle = 0;
  EXPECT_TRUE(run_cycle(light_b(), room_only).migrations.empty());
  EXPECT_TRUE(run_cycle(light_b(), PolicyConfig{}).migrations.empty());
  // Drain moves are migrations: without any migration allowed, none is made.
  PolicyConfig no_migrations = with_drains();
  no_migrations.max_migrations_per_cycle = 0;
  EXPECT_TRUE(run_cycle(light_b(), no_migrations).migrations.empty());
}

TEST(Drain, ANodeWithOneJobThatCannotMoveIsNotDrainedAtAll) {
  // b holds a movable job and one that cannot be checkpointed: moving only the first would pay a
  // pause and power nothing down.
  auto make = [](bool second_checkpointable) {
    return snapshot_of({gpu_node("a", "h100", 8), gpu_node("b", "h100", 8)},
                       {running_job("a0", "h100", "a", {whole_gpu(0)}, kHour),
                        running_job("a1", "h100", "a", {whole_gpu(1)}, kHour),
                        running_job("a2", "h100", "a", {whole_gpu(2)}, kHour),
                        running_job("b0", "h100", "b", {whole_gpu(0)}, kHour, movable()),
                        running_job("b1", "h100", "b", {whole_gpu(1)}, kHour, {.checkpointable = second_checkpointable})});
  };
  EXPECT_TRUE(run_cycle(make(false), with_drains()).migrations.empty());
  // Both movable: b is emptied onto a.
  Snapshot s = make(true);
  CycleResult r = run_cycle(s, with_drains());
  EXPECT_THAT(moved(r), UnorderedElementsAre(3u, 4u));
  apply_decisions(r, s);
  EXPECT_EQ(jobs_on(s, "b"), 0u);
  EXPECT_EQ(capacity_violation(s), "");
}

TEST(Drain, ANodeIsDrainedOnlyOntoRoomForTheMemoryItsJobsHold) {
  // As light_b, with 16 GiB of memory on a: b0 asked for none, and what it holds decides.
  auto make = [](int64_t held_mib) {
    Snapshot s = snapshot_of({gpu_node("a", "h100", 4, 128000, 16 * 1024), gpu_node("b", "h100", 4), gpu_node("c", "h100", 4)},
                             {running_job("a0", "h100", "a", {whole_gpu(0)}, kHour),
                              running_job("a1", "h100", "a", {whole_gpu(1)}, kHour),
                              running_job("b0", "h100", "b", {whole_gpu(2)}, kHour, movable())});
    s.jobs[2].status.memory_used_mib = held_mib;
    return s;
  };
  CycleResult r = run_cycle(make(8 * 1024), with_drains());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{2});
  EXPECT_EQ(r.migrations[0].pause, std::chrono::milliseconds(1000 + 4400 * 8));
  EXPECT_TRUE(run_cycle(make(20 * 1024), with_drains()).migrations.empty()) << "a cannot hold it, and c is idle";
}

TEST(Drain, AJobThatEndsSoonIsLeftToFinishAndItsNodeWaitsForIt) {
  // b0 ran an hour of its 70 minutes: it ends in 10, within power_down_after (30m).
  EXPECT_TRUE(run_cycle(light_b(movable({.estimate = kHour + 10 * kMinute})), with_drains()).migrations.empty());
  // Ending in two hours, it is worth moving.
  EXPECT_EQ(moved(run_cycle(light_b(movable({.estimate = 3 * kHour})), with_drains())), std::vector<JobIndex>{2});
}

TEST(Drain, NodesALiveMigrationLeavesOrEntersAreNeitherDrainedNorMovedOnto) {
  // Two nodes with one movable job each: a cycle drains one onto the other. While that move is in
  // flight (the job still bound to its source), the next cycle must not drain the target back onto
  // the node being emptied.
  Snapshot s = snapshot_of({gpu_node("a", "h100", 4), gpu_node("b", "h100", 4)},
                           {running_job("a0", "h100", "a", {whole_gpu(0)}, kHour, movable()),
                            running_job("b0", "h100", "b", {whole_gpu(0)}, kHour, movable())});
  CycleResult first = run_cycle(s, with_drains());
  ASSERT_EQ(first.migrations.size(), 1u);
  const JobIndex mover = first.migrations[0].job;
  const std::string to = node_of_move(s, first.migrations[0]);
  s.jobs[mover].status.migration = model::Migration{to, s.now};  // asked of the agents, not done yet
  EXPECT_TRUE(run_cycle(s, with_drains()).migrations.empty());
}

TEST(Drain, NoJobEverLandsOnAnIdleNode) {
  // a is idle; b's job could go nowhere else: it stays.
  Snapshot s = snapshot_of({gpu_node("a", "h100", 4), gpu_node("b", "h100", 4)},
                           {running_job("b0", "h100", "b", {whole_gpu(0)}, kHour, movable())});
  EXPECT_TRUE(run_cycle(s, with_drains()).migrations.empty());
}

TEST(Drain, LongRunningWorkGathersOnNodesThatStayBusyAsLongRatherThanTheFullest) {
  // c is fuller but its jobs end in an hour; d's run on without an estimate, like b's job: b's job
  // goes to d, so c still drains by itself in an hour.
  Snapshot s = snapshot_of({gpu_node("b", "h100", 8), gpu_node("c", "h100", 8), gpu_node("d", "h100", 8)},
                           {running_job("b0", "h100", "b", {whole_gpu(0)}, kHour, movable()),
                            running_job("c0", "h100", "c", {whole_gpu(0)}, kHour, {.estimate = 2 * kHour}),
                            running_job("c1", "h100", "c", {whole_gpu(1)}, kHour, {.estimate = 2 * kHour}),
                            running_job("c2", "h100", "c", {whole_gpu(2)}, kHour, {.estimate = 2 * kHour}),
                            running_job("d0", "h100", "d", {whole_gpu(0)}, kHour)});
  CycleResult r = run_cycle(s, with_drains());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{0});
  EXPECT_EQ(node_of_move(s, r.migrations[0]), "d");
  // With d's job ending as soon as c's, the fullest node takes it.
  s.jobs[4].spec.estimated_duration = 2 * kHour;
  r = run_cycle(s, with_drains());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{0});
  EXPECT_EQ(node_of_move(s, r.migrations[0]), "c");
}

TEST(Drain, MovingLongWorkOntoANodeAboutToDrainItselfSavesNothingAndIsNotDone) {
  // b's job runs on without an estimate; the only busy node, a, is done in 20 minutes. Moving the
  // job there would keep a on as long as it keeps b on now: the saving is a's 20 minutes, less
  // than power_down_after.
  Snapshot s = snapshot_of({gpu_node("a", "h100", 8), gpu_node("b", "h100", 8)},
                           {running_job("a0", "h100", "a", {whole_gpu(0)}, kHour, {.estimate = kHour + 20 * kMinute}),
                            running_job("b0", "h100", "b", {whole_gpu(0)}, kHour, movable())});
  EXPECT_TRUE(run_cycle(s, with_drains()).migrations.empty());
  // a busy for two more hours: the move saves those two hours of b.
  s.jobs[0].spec.estimated_duration = 3 * kHour;
  EXPECT_EQ(moved(run_cycle(s, with_drains())), std::vector<JobIndex>{1});
}

TEST(Drain, MovesPerCycleAreBoundedByTheDrainLimitAndTheCyclesTotal) {
  // a is busy with room; b, c and d hold one movable job each.
  auto make = [] {
    return snapshot_of({gpu_node("a", "h100", 8), gpu_node("b", "h100", 8), gpu_node("c", "h100", 8),
                        gpu_node("d", "h100", 8)},
                       {running_job("a0", "h100", "a", {whole_gpu(0)}, kHour),
                        running_job("b0", "h100", "b", {whole_gpu(0)}, kHour, movable()),
                        running_job("c0", "h100", "c", {whole_gpu(0)}, kHour, movable()),
                        running_job("d0", "h100", "d", {whole_gpu(0)}, kHour, movable())});
  };
  // Unbounded enough, all three are emptied onto a, which runs work that cannot move, and never
  // onto a node emptied in this cycle.
  Snapshot all = make();
  CycleResult r = run_cycle(all, with_drains(8));
  ASSERT_EQ(r.migrations.size(), 3u);
  for (const auto& m : r.migrations) EXPECT_EQ(node_of_move(all, m), "a");
  apply_decisions(r, all);
  EXPECT_EQ(capacity_violation(all), "");
  std::set<JobIndex> seen;
  for (const auto& m : r.migrations) {
    EXPECT_TRUE(seen.insert(m.job).second) << "a job moved twice";
    EXPECT_EQ(jobs_on(all, make().jobs[m.job].status.placement[0].node), 0u) << "its node was not emptied";
  }
  EXPECT_EQ(run_cycle(make(), with_drains(1)).migrations.size(), 1u);
  PolicyConfig one_in_all = with_drains(8);
  one_in_all.max_migrations_per_cycle = 1;
  EXPECT_EQ(run_cycle(make(), one_in_all).migrations.size(), 1u);
}

TEST(Drain, ANodeWithMoreJobsThanMaxMovesPerJobIsNotDrained) {
  auto make = [] {
    return snapshot_of({gpu_node("a", "h100", 8), gpu_node("b", "h100", 8)},
                       {running_job("a0", "h100", "a", {whole_gpu(0)}, kHour),
                        running_job("a1", "h100", "a", {whole_gpu(1)}, kHour),
                        running_job("b0", "h100", "b", {whole_gpu(0)}, kHour, movable()),
                        running_job("b1", "h100", "b", {whole_gpu(1)}, kHour, movable())});
  };
  PolicyConfig one = with_drains();
  one.max_moves_per_job = 1;
  EXPECT_TRUE(run_cycle(make(), one).migrations.empty());
  one.max_moves_per_job = 2;
  EXPECT_EQ(run_cycle(make(), one).migrations.size(), 2u);
  // The drain limit bounds a node's moves too: a node is drained whole or not at all.
  EXPECT_TRUE(run_cycle(make(), with_drains(1)).migrations.empty());
}

TEST(Drain, AJobMovedWithinTheCooldownIsNotMovedAgain) {
  Snapshot s = light_b();
  s.jobs[2].status.events.push_back({model::JobEventType::kMigrated, t0() - 20 * kMinute, "moved"});
  EXPECT_TRUE(run_cycle(s, with_drains()).migrations.empty());
  s.jobs[2].status.events.back().time = t0() - 2 * kHour;
  EXPECT_EQ(run_cycle(s, with_drains()).migrations.size(), 1u);
}

TEST(Drain, TheNodesThatStayBusyKeepTheReserveFree) {
  // After the move a holds three of its four GPUs: a quarter stays free.
  PolicyConfig strict = with_drains();
  strict.drain_reserve = 0.3;
  EXPECT_TRUE(run_cycle(light_b(), strict).migrations.empty());
  strict.drain_reserve = 0.25;
  EXPECT_EQ(run_cycle(light_b(), strict).migrations.size(), 1u);
  // Host resources count too: a's CPU would be 80% taken.
  Snapshot cpu_bound = light_b(movable({.cpu_milli = 51200}));
  cpu_bound.jobs[0].spec.cpu_milli = 51200;
  EXPECT_TRUE(run_cycle(cpu_bound, strict).migrations.empty());
}

TEST(Drain, NothingDrainsWhileAJobWaitsForRoomButAJobThatCanNeverFitHoldsNothingBack) {
  // a: two of four GPUs taken by jobs that cannot move; b: one movable dev job. An opportunistic
  // four-GPU job fits no node now and may not move dev work for room: it waits, and the drain that
  // would empty b (room it could use later) is not made.
  auto make = [](std::string_view pending_gpu) {
    return snapshot_of({gpu_node("a", "h100", 4), gpu_node("b", "h100", 4)},
                       {running_job("a0", "h100", "a", {whole_gpu(0)}, kHour),
                        running_job("a1", "h100", "a", {whole_gpu(1)}, kHour),
                        running_job("b0", "h100", "b", {whole_gpu(0)}, kHour, movable()),
                        pending_job("wait", pending_gpu, {.priority_class = "opportunistic"})});
  };
  CycleResult r = run_cycle(make("h100x4"), with_drains());
  EXPECT_FALSE(placed(r, 3));
  EXPECT_TRUE(r.migrations.empty());
  // Sixteen GPUs can never fit eight: b is drained.
  r = run_cycle(make("h100x16"), with_drains());
  EXPECT_FALSE(placed(r, 3));
  ASSERT_EQ(moved(r), std::vector<JobIndex>{2});
  EXPECT_EQ(r.migrations[0].reason, MoveReason::kDrain);
}

TEST(Drain, PolicyConfigReadsAndWritesItsDrainKnobsAndRefusesDrainsWithoutMigration) {
  PolicyConfig config = with_drains(3);
  config.drain_reserve = 0.4;
  auto back = policy_config_from_json(to_json(config));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->max_drain_moves_per_cycle, 3);
  EXPECT_DOUBLE_EQ(back->drain_reserve, 0.4);
  EXPECT_EQ(PolicyConfig{}.max_drain_moves_per_cycle, 0);

  auto off = policy_config_from_json(Json{{"max_drain_moves_per_cycle", 2}});
  ASSERT_FALSE(off);
  EXPECT_THAT(off.error().to_string(), AllOf(HasSubstr("max_drain_moves_per_cycle"), HasSubstr("2"),
                                             HasSubstr("max_migrations_per_cycle")));
  auto reserve = policy_config_from_json(Json{{"drain_reserve", 1.5}});
  ASSERT_FALSE(reserve);
  EXPECT_THAT(reserve.error().to_string(), AllOf(HasSubstr("drain_reserve"), HasSubstr("1.5")));
}

}  // namespace
}  // namespace cnlab::sched
