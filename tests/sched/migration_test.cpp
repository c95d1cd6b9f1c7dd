// Migration for room: the cycle moves running jobs live so that a waiting job can start.
#include <set>
#include <string_view>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fixtures.h"

namespace cnlab::sched {
namespace {

using namespace testing;

PolicyConfig with_moves(int per_cycle = 8) {
  PolicyConfig config;
  config.max_migrations_per_cycle = per_cycle;
  config.migrate_gpu_jobs = true;
  return config;
}

std::vector<JobIndex> moved(const CycleResult& r) {
  std::vector<JobIndex> v;
  for (const auto& m : r.migrations) v.push_back(m.job);
  return v;
}

// Two nodes of two H100s, one GPU of each taken by a running checkpointable job; a dev job asking
// for a whole node (two GPUs) cannot start, and dev may not pre-empt.
Snapshot split_nodes(JobOptions first = {.checkpointable = true}, JobOptions second = {.checkpointable = true}) {
  return snapshot_of({gpu_node("a", "h100", 2), gpu_node("b", "h100", 2)},
                     {running_job("one", "h100", "a", {whole_gpu(0)}, kHour, first),
                      running_job("two", "h100", "b", {whole_gpu(1)}, kHour, second),
                      pending_job("pair", "h100x2")});
}

TEST(Migration, AJobMovesToFreeAWholeNodeForAWaitingGang) {
  Snapshot s = split_nodes();
  CycleResult r = run_cycle(s, with_moves());
  ASSERT_EQ(r.migrations.size(), 1u);
  const Migration& m = r.migrations[0];
  EXPECT_EQ(m.for_job, 2u);
  const Placement* p = placement_of(r, 2);
  ASSERT_NE(p, nullptr) << r.reason_for(2);
  EXPECT_EQ(p->after_migrating, std::vector<JobIndex>{m.job});
  EXPECT_TRUE(p->after_preempting.empty());
  EXPECT_TRUE(r.preemptions.empty());
  // The mover leaves the node the gang takes, for the other one.
  ASSERT_EQ(m.to.size(), 1u);
  ASSERT_EQ(p->nodes.size(), 1u);
  EXPECT_NE(m.to[0].node, p->nodes[0].node);
  EXPECT_EQ(s.nodes[p->nodes[0].node].meta.name, s.jobs[m.job].status.placement[0].node);

  apply_decisions(r, s);
  EXPECT_EQ(capacity_violation(s), "");
  EXPECT_EQ(s.jobs[m.job].status.phase, model::JobPhase::kRunning);
  ASSERT_FALSE(s.jobs[m.job].status.events.empty());
  EXPECT_EQ(s.jobs[m.job].status.events.back().type, model::JobEventType::kMigrated);
}

TEST(Migration, NothingMovesUnlessTheConfigurationAllowsIt) {
  CycleResult r = run_cycle(split_nodes(), PolicyConfig{});
  EXPECT_TRUE(r.migrations.empty());
  EXPECT_FALSE(placed(r, 2));
  EXPECT_EQ(r.stats.migration_searches, 0u);
}

TEST(Migration, JobsThatCannotBeCheckpointedStayWhereTheyAre) {
  CycleResult r = run_cycle(split_nodes({}, {}), with_moves());
  EXPECT_TRUE(r.migrations.empty());
  EXPECT_FALSE(placed(r, 2));
}

TEST(Migration, JobsHoldingGpusMoveOnlyWhereTheConfigurationSaysGpuMemoryCanMove) {
  PolicyConfig no_gpu_moves = with_moves();
  no_gpu_moves.migrate_gpu_jobs = false;
  EXPECT_TRUE(run_cycle(split_nodes(), no_gpu_moves).migrations.empty());
}

// The server carries out a move only to a node whose agent takes migrations and, for a job holding
// GPUs, restores their state onto GPUs of the kind it holds: the cycle plans no other.
TEST(Migration, AJobMovesOnlyToANodeThatCanTakeItsMove) {
  // The gang needs node a whole; "one" can make room only by moving to c's free GPU ("three" on c
  // cannot be checkpointed, so c never empties).
  auto cluster = [](model::Node c) {
    return snapshot_of({gpu_node("a", "h100", 2), std::move(c)},
                       {running_job("one", "h100", "a", {whole_gpu(0)}, kHour, {.checkpointable = true}),
                        running_job("three", "h100", "c", {whole_gpu(0)}, kHour), pending_job("pair", "h100x2")});
  };
  CycleResult r = run_cycle(cluster(gpu_node("c", "h100", 2)), with_moves());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{0}) << r.reason_for(2);
  EXPECT_EQ(r.migrations[0].to[0].node, 1u);
  EXPECT_TRUE(placed(r, 2));

  model::Node no_agent = gpu_node("c", "h100", 2);
  no_agent.peer_address.clear();
  model::Node no_tool = gpu_node("c", "h100", 2);
  no_tool.gpu_checkpoint = false;
  model::Node simulated = gpu_node("c", "h100", 2);
  simulated.simulated = true;
  for (const auto& [what, c] : {std::pair{"takes no migrations", no_agent}, std::pair{"restores no GPU state", no_tool},
                                std::pair{"has simulated GPUs", simulated}}) {
    SCOPED_TRACE(what);
    r = run_cycle(cluster(c), with_moves());
    EXPECT_TRUE(r.migrations.empty());
    EXPECT_FALSE(placed(r, 2));
  }
  // Nor does a job move off a node that cannot dump it for a move: no working CRIU there (no peer
  // endpoint), or for a job holding GPUs, no cuda-checkpoint.
  for (const char* what : {"takes no migrations", "restores no GPU state"}) {
    SCOPED_TRACE(std::string("source ") + what);
    Snapshot s = cluster(gpu_node("c", "h100", 2));
    if (what[0] == 't') s.nodes[0].peer_address.clear(); else s.nodes[0].gpu_checkpoint = false;
    r = run_cycle(s, with_moves());
    EXPECT_TRUE(r.migrations.empty());
    EXPECT_FALSE(placed(r, 2));
  }

  // A production job for which no move can be carried out pre-empts instead (a move planned there
  // would be refused by the server, cycle after cycle, and pre-emption never tried).
  Snapshot urgent = cluster(no_agent);
  urgent.jobs[0].spec.priority_class = "opportunistic";
  urgent.jobs[2].spec.priority_class = "production";
  r = run_cycle(urgent, with_moves());
  EXPECT_TRUE(r.migrations.empty());
  ASSERT_EQ(r.preemptions.size(), 1u) << r.reason_for(2);
  EXPECT_EQ(r.preemptions[0].victim, 0u);
  EXPECT_TRUE(placed(r, 2));

  // A job holding no GPU needs only an agent that takes migrations.
  model::Node host = gpu_node("host", "h100", 0);
  host.gpu_checkpoint = false;
  Snapshot s = snapshot_of({gpu_node("a", "h100", 2), host},
                           {running_job("prep", "none", "a", {}, kHour, {.cpu_milli = 80000, .checkpointable = true}),
                            running_job("hog", "none", "host", {}, kHour, {.cpu_milli = 40000}),
                            pending_job("wide", "none", {.cpu_milli = 100000})});
  r = run_cycle(s, with_moves());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{0}) << r.reason_for(2);
  EXPECT_EQ(r.migrations[0].to[0].node, 1u);
  s.nodes[1].peer_address.clear();
  EXPECT_TRUE(run_cycle(s, with_moves()).migrations.empty());
}

int mig_profile(const model::Node& node, std::string_view name) {
  const auto& profiles = model::gpu_model(node.gpus.at(0).model).mig_profiles;
  for (size_t p = 0; p < profiles.size(); ++p) {
    if (profiles[p].name == name) return static_cast<int>(p);
  }
  return -1;
}

TEST(Migration, AJobInAMigInstanceMovesIntoAnInstanceOfItsProfileButNeverTurnsAGpuToMig) {
  // m (a 3g.40gb instance and 6 of a's 8 cores) is placed on a while b is cordoned.
  model::Node a = gpu_node("a", "h100", 2, 8000), b = gpu_node("b", "h100", 1, 8000);
  b.unschedulable = true;
  Snapshot s = snapshot_of({a, b}, {pending_job("m", "h100:3g.40gb", {.cpu_milli = 6000, .checkpointable = true})});
  apply_decisions(run_cycle(s, with_moves()), s);
  ASSERT_EQ(s.jobs[0].status.placement.at(0).node, "a");
  ASSERT_EQ(s.jobs[0].status.phase, model::JobPhase::kRunning);
  s.jobs[0].status.started_at = t0() - kHour;
  // w needs a whole GPU and 4 cores: only a has a whole GPU, and m holds its cores.
  s.jobs.push_back(pending_job("w", "h100", {.cpu_milli = 4000}));
  s.nodes[1].unschedulable = false;
  CycleResult whole = run_cycle(s, with_moves());
  EXPECT_TRUE(whole.migrations.empty()) << "a move never turns its target's GPU to MIG mode";

  auto expect_moved_to_b = [&](const CycleResult& r, int start) {
    ASSERT_EQ(r.migrations.size(), 1u) << r.reason_for(1);
    EXPECT_EQ(r.migrations[0].job, 0u);
    ASSERT_EQ(r.migrations[0].to.size(), 1u);
    EXPECT_EQ(s.nodes[r.migrations[0].to[0].node].meta.name, "b");
    ASSERT_EQ(r.migrations[0].to[0].gpus.size(), 1u);
    EXPECT_EQ(r.migrations[0].to[0].gpus[0].mig_start, start);
    const Placement* p = placement_of(r, 1);
    ASSERT_NE(p, nullptr) << r.reason_for(1);
    EXPECT_EQ(s.nodes[p->nodes[0].node].meta.name, "a");
  };
  const int three_g = mig_profile(s.nodes[1], "3g.40gb");
  ASSERT_GE(three_g, 0);
  // b's GPU in MIG mode with a free instance of m's profile: m moves into it, and nothing is made.
  s.nodes[1].gpus[0].mig_enabled = true;
  s.nodes[1].gpus[0].mig_instances = {{three_g, 4}};
  CycleResult into_free = run_cycle(s, with_moves());
  expect_moved_to_b(into_free, 4);
  EXPECT_TRUE(into_free.repartitions.empty());

  // Without one, an instance of its profile is made in b's free slots for it, and b's new layout
  // is part of the decision.
  s.nodes[1].gpus[0].mig_instances.clear();
  CycleResult made = run_cycle(s, with_moves());
  expect_moved_to_b(made, 0);
  ASSERT_EQ(made.repartitions.size(), 1u);
  EXPECT_EQ(s.nodes[made.repartitions[0].node].meta.name, "b");
  EXPECT_EQ(made.repartitions[0].gpu, 0);
  EXPECT_EQ(made.repartitions[0].instances, (std::vector<model::MigInstance>{{three_g, 0}}));
  // Without GPU moves allowed, nothing moves.
  PolicyConfig no_gpu_moves = with_moves();
  no_gpu_moves.migrate_gpu_jobs = false;
  EXPECT_TRUE(run_cycle(s, no_gpu_moves).migrations.empty());

  apply_decisions(made, s);
  EXPECT_EQ(capacity_violation(s), "");
  EXPECT_EQ(s.nodes[1].gpus[0].mig_instances, (std::vector<model::MigInstance>{{three_g, 0}}));
}

TEST(Migration, TwoJobsMovingIntoInstancesMadeOnOneGpuGetSlotsOfTheirOwn) {
  // m1 and m2 (3g.40gb each, 3 of a's 8 cores each) fill a's first GPU in MIG mode; w needs a's
  // whole second GPU and 7 cores, so both must move, to b's GPU in MIG mode without instances.
  model::Node a = gpu_node("a", "h100", 2, 8000), b = gpu_node("b", "h100", 1, 8000);
  b.unschedulable = true;
  a.gpus[0].mig_enabled = true;
  Snapshot s = snapshot_of({a, b}, {pending_job("m1", "h100:3g.40gb", {.cpu_milli = 3000, .checkpointable = true}),
                                    pending_job("m2", "h100:3g.40gb", {.cpu_milli = 3000, .checkpointable = true})});
  apply_decisions(run_cycle(s, with_moves()), s);
  for (auto& job : s.jobs) {
    ASSERT_EQ(job.status.phase, model::JobPhase::kRunning) << job.meta.name;
    ASSERT_EQ(job.status.placement.at(0).node, "a");
    job.status.started_at = t0() - kHour;
  }
  s.jobs.push_back(pending_job("w", "h100", {.cpu_milli = 7000}));
  s.nodes[1].unschedulable = false;
  s.nodes[1].gpus[0].mig_enabled = true;

  CycleResult r = run_cycle(s, with_moves());
  ASSERT_EQ(r.migrations.size(), 2u) << r.reason_for(2);
  ASSERT_NE(placement_of(r, 2), nullptr) << r.reason_for(2);
  std::set<int> starts;
  for (const Migration& m : r.migrations) {
    ASSERT_EQ(m.to.size(), 1u);
    EXPECT_EQ(s.nodes[m.to[0].node].meta.name, "b");
    ASSERT_EQ(m.to[0].gpus.size(), 1u);
    starts.insert(m.to[0].gpus[0].mig_start);
  }
  EXPECT_EQ(starts, (std::set<int>{0, 4})) << "each mover has an instance of its own";
  ASSERT_FALSE(r.repartitions.empty());
  EXPECT_EQ(r.repartitions.back().instances.size(), 2u) << "the last layout written holds both";
  apply_decisions(r, s);
  EXPECT_EQ(capacity_violation(s), "");
  EXPECT_EQ(s.nodes[1].gpus[0].mig_instances.size(), 2u);
}

TEST(Migration, AJobBeingCancelledIsNotMoved) {
  Snapshot s = split_nodes();
  s.jobs[0].status.cancel_requested = s.jobs[1].status.cancel_requested = true;
  EXPECT_TRUE(run_cycle(s, with_moves()).migrations.empty());
}

TEST(Migration, AJobMovedWithinTheCooldownIsNotMovedAgain) {
  Snapshot s = split_nodes();
  for (size_t j = 0; j < 2; ++j) {
    s.jobs[j].status.events.push_back({model::JobEventType::kMigrated, t0() - 20 * kMinute, "moved"});
  }
  EXPECT_TRUE(run_cycle(s, with_moves()).migrations.empty());
  // Past the hour, either may move again.
  for (model::Job& job : s.jobs) {
    if (!job.status.events.empty()) job.status.events.back().time = t0() - 2 * kHour;
  }
  EXPECT_EQ(run_cycle(s, with_moves()).migrations.size(), 1u);
}

TEST(Migration, AJobMigratingNowIsNotMovedAgain) {
  Snapshot s = split_nodes();
  s.jobs[0].status.migration = model::Migration{"b", t0(), "", std::nullopt, 0};
  s.jobs[1].status.migration = model::Migration{"a", t0(), "", std::nullopt, 0};
  EXPECT_TRUE(run_cycle(s, with_moves()).migrations.empty());
}

TEST(Migration, AJobThatStartsSoonByItsReservationWaitsInstead) {
  // "one" ends in 5 minutes: the gang is reserved node a then, and nothing moves.
  Snapshot s = split_nodes({.estimate = kHour + 5 * kMinute, .checkpointable = true},
                           {.checkpointable = true});
  CycleResult r = run_cycle(s, with_moves());
  EXPECT_TRUE(r.migrations.empty());
  ASSERT_EQ(r.reservations.size(), 1u);
  EXPECT_EQ(r.reservations[0].start, t0() + 5 * kMinute);
  // Ending in half an hour, waiting is the dearer choice: a job moves.
  s.jobs[0].spec.estimated_duration = kHour + 30 * kMinute;
  EXPECT_EQ(run_cycle(s, with_moves()).migrations.size(), 1u);
}

TEST(Migration, AJobMovesNoWorkOfAHigherTierUnlessTheConfigurationAllowsIt) {
  Snapshot s = split_nodes({.priority_class = "production", .checkpointable = true},
                           {.priority_class = "inference", .checkpointable = true});
  CycleResult r = run_cycle(s, with_moves());
  EXPECT_TRUE(r.migrations.empty());
  EXPECT_FALSE(placed(r, 2));
  PolicyConfig any_tier = with_moves();
  any_tier.move_higher_tiers = true;
  EXPECT_EQ(run_cycle(s, any_tier).migrations.size(), 1u);
}

TEST(Migration, TheCheapestMoveWinsLowerTiersAndLessMemoryFirst) {
  // Equal in blocks: the opportunistic job moves rather than the production one.
  Snapshot s = split_nodes({.priority_class = "production", .checkpointable = true},
                           {.priority_class = "opportunistic", .checkpointable = true});
  PolicyConfig any_tier = with_moves();
  any_tier.move_higher_tiers = true;
  EXPECT_EQ(moved(run_cycle(s, any_tier)), std::vector<JobIndex>{1});
  s.jobs[1].spec.priority_class = "inference";  // now the production job is the cheaper one
  EXPECT_EQ(moved(run_cycle(s, any_tier)), std::vector<JobIndex>{0});
  // Same tier: the job with less host memory (a shorter pause) moves.
  s = split_nodes({.memory_mib = 4096, .checkpointable = true}, {.memory_mib = 64 * 1024, .checkpointable = true});
  CycleResult r = run_cycle(s, with_moves());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{0});
  EXPECT_EQ(r.migrations[0].pause, std::chrono::milliseconds(1000 + 4400 * 4));
  // What a move copies is what the job's processes hold, when its agent measured more than it
  // asked for: the first job, asking 4 GiB, holds 80 GiB, and the second is now the cheaper one.
  s.jobs[0].status.memory_used_mib = 80 * 1024;
  r = run_cycle(s, with_moves());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{1});
  EXPECT_EQ(r.migrations[0].pause, std::chrono::milliseconds(1000 + 4400 * 64));
  // Less than it asked for: the request stands.
  s.jobs[0].status.memory_used_mib = 1024;
  r = run_cycle(s, with_moves());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{0});
  EXPECT_EQ(r.migrations[0].pause, std::chrono::milliseconds(1000 + 4400 * 4));
}

TEST(Migration, AMoverLandsOnlyWhereThereIsRoomForTheMemoryItsProcessesHold) {
  // Only node b's free GPU can take `one` so that the pair gets node a. `one` asked for no memory
  // (so it has no limit); what its processes hold decides whether b can take it.
  auto make = [](int64_t held_mib, int64_t b_memory_mib) {
    Snapshot s = snapshot_of({gpu_node("a", "h100", 2), gpu_node("b", "h100", 2, 128000, b_memory_mib)},
                             {running_job("one", "h100", "a", {whole_gpu(0)}, kHour, {.checkpointable = true}),
                              running_job("fill", "h100", "b", {whole_gpu(0)}, kHour, {.memory_mib = 4096}),
                              pending_job("pair", "h100x2")});
    s.jobs[0].status.memory_used_mib = held_mib;
    return s;
  };
  // b has 12 GiB free: room for 8, not for 20.
  Snapshot s = make(8 * 1024, 16 * 1024);
  CycleResult r = run_cycle(s, with_moves());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{0}) << r.reason_for(2);
  EXPECT_TRUE(placed(r, 2));
  r = run_cycle(make(20 * 1024, 16 * 1024), with_moves());
  EXPECT_TRUE(r.migrations.empty());
  EXPECT_FALSE(placed(r, 2));
  EXPECT_EQ(moved(run_cycle(make(20 * 1024, 32 * 1024), with_moves())), std::vector<JobIndex>{0});
}

// Three nodes of four GPUs, each with two one-GPU jobs: a four-GPU job needs two moves.
Snapshot half_full() {
  std::vector<model::Job> jobs;
  for (const char* node : {"a", "b", "c"}) {
    for (int g = 0; g < 2; ++g) {
      jobs.push_back(running_job(std::string(node) + std::to_string(g), "h100", node, {whole_gpu(g)}, kHour,
                                 {.checkpointable = true}));
    }
  }
  jobs.push_back(pending_job("four", "h100x4"));
  return snapshot_of({gpu_node("a", "h100", 4), gpu_node("b", "h100", 4), gpu_node("c", "h100", 4)}, std::move(jobs));
}

TEST(Migration, MovesPerWaitingJobAndPerCycleAreBounded) {
  Snapshot s = half_full();
  CycleResult r = run_cycle(s, with_moves());
  ASSERT_EQ(r.migrations.size(), 2u);
  ASSERT_TRUE(placed(r, 6));
  apply_decisions(r, s);
  EXPECT_EQ(capacity_violation(s), "");

  PolicyConfig one_per_job = with_moves();
  one_per_job.max_moves_per_job = 1;
  EXPECT_TRUE(run_cycle(half_full(), one_per_job).migrations.empty());
  EXPECT_TRUE(run_cycle(half_full(), with_moves(1)).migrations.empty());
}

TEST(Migration, MoversNeverLandOnTheNodeTheyLeaveAndNothingIsOvercommitted) {
  // Node a: two quarter-GPU jobs on GPU 0 and a half on GPU 1; node b: a busy GPU that cannot be
  // checkpointed and a free one. A whole-node job (two GPUs) fits only if all three go to b.
  Snapshot s = snapshot_of({gpu_node("a", "h100", 2), gpu_node("b", "h100", 2)},
                           {running_job("q1", "h100-25", "a", {blocks_on(0, 25)}, kHour, {.checkpointable = true}),
                            running_job("q2", "h100-25", "a", {blocks_on(0, 25)}, kHour, {.checkpointable = true}),
                            running_job("h1", "h100-50", "a", {blocks_on(1, 50)}, kHour, {.checkpointable = true}),
                            running_job("busy", "h100", "b", {whole_gpu(0)}, kHour),
                            pending_job("pair", "h100x2")});
  CycleResult r = run_cycle(s, with_moves());
  ASSERT_EQ(r.migrations.size(), 3u) << r.reason_for(4);
  for (const Migration& m : r.migrations) {
    ASSERT_EQ(m.to.size(), 1u);
    EXPECT_EQ(s.nodes[m.to[0].node].meta.name, "b");
  }
  apply_decisions(r, s);
  EXPECT_EQ(capacity_violation(s), "");
  EXPECT_EQ(s.jobs[4].status.placement[0].node, "a");
}

TEST(Migration, NoMoveWhenTheMoversFitNowhereElse) {
  // Node a's one job would have to move, but the only free GPU elsewhere is an L4 it does not
  // accept.
  Snapshot s = snapshot_of({gpu_node("a", "h100", 2), gpu_node("b", "l4", 1)},
                           {running_job("one", "h100", "a", {whole_gpu(0)}, kHour, {.checkpointable = true}),
                            pending_job("pair", "h100x2")});
  CycleResult r = run_cycle(s, with_moves());
  EXPECT_TRUE(r.migrations.empty());
  EXPECT_FALSE(placed(r, 1));
  EXPECT_EQ(r.stats.migration_searches, 1u);
}

TEST(Migration, AMoveComesBeforeAnEvictionWhichWouldLoseWork) {
  // An inference job asking for two GPUs of one node may pre-empt the dev job on node a, or have it
  // moved to node b's free GPU: it moves.
  Snapshot s = snapshot_of({gpu_node("a", "h100", 2), gpu_node("b", "h100", 2)},
                           {running_job("dev", "h100", "a", {whole_gpu(0)}, kHour, {.checkpointable = true}),
                            running_job("fill", "h100", "b", {whole_gpu(0)}, kHour),
                            pending_job("serve", "h100x2", {.priority_class = "inference"})});
  CycleResult r = run_cycle(s, with_moves());
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_EQ(moved(r), std::vector<JobIndex>{0});
  EXPECT_EQ(s.nodes[r.migrations[0].to[0].node].meta.name, "b");
  ASSERT_TRUE(placed(r, 2));
  EXPECT_EQ(s.nodes[placement_of(r, 2)->nodes[0].node].meta.name, "a");
  // Without moves it evicts.
  EXPECT_EQ(run_cycle(s, PolicyConfig{}).preemptions.size(), 1u);
}

TEST(Migration, PolicyConfigReadsAndWritesItsMigrationKnobs) {
  PolicyConfig config = with_moves(3);
  config.max_moves_per_job = 2;
  config.migration_cooldown = 2 * kHour;
  config.migration_pause_per_gib = std::chrono::milliseconds(700);
  config.migrate_gpu_jobs = false;
  config.move_higher_tiers = true;
  auto back = policy_config_from_json(to_json(config));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->max_migrations_per_cycle, 3);
  EXPECT_EQ(back->max_moves_per_job, 2);
  EXPECT_EQ(back->migration_cooldown, 2 * kHour);
  EXPECT_EQ(back->migration_pause_per_gib, std::chrono::milliseconds(700));
  EXPECT_FALSE(back->migrate_gpu_jobs);
  EXPECT_TRUE(back->move_higher_tiers);
  auto bad = policy_config_from_json(Json{{"max_moves_per_job", 0}});
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().to_string(), ::testing::HasSubstr("max_moves_per_job"));
}

TEST(Migration, TheRoomAMoveInFlightWillTakeOnItsTargetIsHeld) {
  // m runs on a and is moving to b (asked of the agents, not done yet); b's 4 cores are what m will
  // take. A waiting job that needs them must not get them meanwhile.
  const JobOptions three_cores{.cpu_milli = 3000, .memory_mib = 1024, .checkpointable = true};
  auto make = [&](bool moving) {
    model::Job m = running_job("m", "none", "a", {}, kHour, three_cores);
    if (moving) m.status.migration = model::Migration{"b", t0()};
    return snapshot_of({gpu_node("a", "h100", 0, 4000, 16 * 1024), gpu_node("b", "h100", 0, 4000, 16 * 1024)},
                       {m, pending_job("p", "none", three_cores)});
  };
  EXPECT_TRUE(placed(run_cycle(make(false), PolicyConfig{}), 1)) << "b is free while nothing moves there";
  CycleResult r = run_cycle(make(true), PolicyConfig{});
  EXPECT_FALSE(placed(r, 1)) << "b's room is m's until it arrives";
  EXPECT_TRUE(r.warnings.empty());
}

TEST(Migration, TheRoomHeldForAMoveInFlightIsTheMemoryItsProcessesHold) {
  // m asked for 1 GiB and its processes hold 14: b (16 GiB) keeps 2 GiB free while m moves there,
  // too little for p's 4 GiB. a has no CPU left for p.
  auto make = [](int64_t held_mib) {
    model::Job m = running_job("m", "none", "a", {}, kHour, {.cpu_milli = 1000, .memory_mib = 1024, .checkpointable = true});
    m.status.memory_used_mib = held_mib;
    m.status.migration = model::Migration{"b", t0()};
    return snapshot_of({gpu_node("a", "h100", 0, 1000, 32 * 1024), gpu_node("b", "h100", 0, 4000, 16 * 1024)},
                       {m, pending_job("p", "none", {.cpu_milli = 1000, .memory_mib = 4096})});
  };
  EXPECT_TRUE(placed(run_cycle(make(512), PolicyConfig{}), 1)) << "holding less than it asked, its request is held";
  EXPECT_FALSE(placed(run_cycle(make(14 * 1024), PolicyConfig{}), 1));
}

}  // namespace
}  // namespace cnlab::sched
