// Properties over randomized clusters and workloads: capacity is never over-committed, gangs are
// all or nothing, model constraints hold, the output is deterministic, reservations are never
// delayed by backfill, and deadline jobs under floods of other work finish in time.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "fixtures.h"

namespace cnlab::sched {
namespace {

using namespace testing;

struct World {
  Snapshot snapshot;
  std::vector<Duration> actual;  // how long each job really runs (its estimate when it has one)
};

model::Node random_node(std::mt19937_64& rng, int i) {
  static const std::vector<std::string_view> kModels = {"h100", "h100", "a100m80", "l4", "h200"};
  std::string_view m = kModels[rng() % kModels.size()];
  int gpus = std::vector<int>{1, 2, 4, 8, 8}[rng() % 5];
  auto node = gpu_node("n" + std::to_string(i), m, gpus, 16000 * (1 + rng() % 8), 65536 * (1 + rng() % 8));
  auto id = *model::find_model(m);
  for (auto& gpu : node.gpus) {
    if (!model::gpu_model(id).mig_capable() || rng() % 4 != 0) continue;
    gpu.mig_enabled = true;
    model::MigLayout layout(id);
    for (int tries = 0; tries < 4; ++tries) {
      int profile = static_cast<int>(rng() % 6);
      int start = layout.first_fit(profile);
      if (start >= 0) (void)layout.add(profile, start);
    }
    gpu.mig_instances = layout.instances();
  }
  if (rng() % 20 == 0) node.unschedulable = true;
  if (rng() % 25 == 0) node.gpus[0].healthy = false;
  return node;
}

model::Job random_job(std::mt19937_64& rng, int i, Time now) {
  static const std::vector<std::string> kShapes = {
      "h100-10", "h100-25", "h100-50", "h100-75", "h100", "h100x2", "h100x4", "h100x8", "h100x16",
      "a100m80-30", "a100m80x2", "any-20", "any", "l4-50", "l4x2", "h200-40", "h100:1g.10gb", "h100:3g.40gb",
      "a100m80:2g.20gb", "h200:7g.141gb", "h100|h200-60", "h100-5", "none"};
  static const std::vector<std::string> kClasses = {"inference", "production", "dev", "dev", "opportunistic"};
  JobOptions o;
  o.project = "p" + std::to_string(rng() % 4);
  o.user = "u" + std::to_string(rng() % 3);
  o.priority_class = kClasses[rng() % kClasses.size()];
  o.cpu_milli = 1000 * static_cast<int64_t>(rng() % 16);
  o.memory_mib = 1024 * static_cast<int64_t>(rng() % 64);
  o.submitted_ago = Duration{static_cast<int64_t>(rng() % 3600)};
  if (rng() % 3 != 0) o.estimate = Duration{600 + static_cast<int64_t>(rng() % 7200)};
  if (o.estimate && rng() % 4 == 0) o.deadline = now + *o.estimate + Duration{static_cast<int64_t>(rng() % 14400)};
  o.checkpointable = rng() % 2 == 0;
  std::string shape = kShapes[rng() % kShapes.size()];
  if (shape == "h100-25" && rng() % 2 == 0) o.vram = "30Gi";
  auto job = pending_job("j" + std::to_string(i), shape, o);
  job.status.submitted_at = now - o.submitted_ago;
  return job;
}

World random_world(uint64_t seed, int nodes, int jobs) {
  std::mt19937_64 rng(seed);
  World w;
  w.snapshot.now = t0();
  for (int i = 0; i < nodes; ++i) w.snapshot.nodes.push_back(random_node(rng, i));
  for (int i = 0; i < jobs; ++i) {
    w.snapshot.jobs.push_back(random_job(rng, i, w.snapshot.now));
    auto est = w.snapshot.jobs.back().spec.estimated_duration;
    w.actual.push_back(est ? *est : Duration{600 + static_cast<int64_t>(rng() % 10000)});
  }
  return w;
}

// Ends jobs whose run time is over, adds arrivals, moves the clock.
void advance(World& w, std::mt19937_64& rng, Duration step, int arrivals) {
  w.snapshot.now += step;
  for (size_t j = 0; j < w.snapshot.jobs.size(); ++j) {
    model::Job& job = w.snapshot.jobs[j];
    if (job.status.phase == model::JobPhase::kRunning && *job.status.started_at + w.actual[j] <= w.snapshot.now) {
      job.status.phase = model::JobPhase::kSucceeded;
      job.status.placement.clear();
    }
  }
  for (int i = 0; i < arrivals; ++i) {
    w.snapshot.jobs.push_back(random_job(rng, static_cast<int>(w.snapshot.jobs.size()), w.snapshot.now));
    auto est = w.snapshot.jobs.back().spec.estimated_duration;
    w.actual.push_back(est ? *est : Duration{600 + static_cast<int64_t>(rng() % 10000)});
  }
}

TEST(Invariants, CapacityGangsAndModelsHoldOverRandomWorkloads) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    World w = random_world(seed, 24, 300);
    std::mt19937_64 rng(seed * 7919);
    for (int step = 0; step < 15; ++step) {
      CycleResult r = run_cycle(w.snapshot, {});
      ASSERT_TRUE(r.warnings.empty()) << "seed " << seed << ": " << r.warnings[0];
      for (const auto& p : r.placements) {
        const auto& spec = w.snapshot.jobs[p.job].spec;
        size_t gpus = 0;
        for (const auto& n : p.nodes) gpus += n.gpus.size();
        size_t want = spec.gpu.kind == model::SliceKind::kWhole ? static_cast<size_t>(spec.gpu.gpu_count)
                      : spec.gpu.kind == model::SliceKind::kNone  ? 0
                                                                  : 1;
        ASSERT_EQ(gpus, want) << "seed " << seed << ": gang " << w.snapshot.jobs[p.job].meta.name << " partial";
      }
      apply_decisions(r, w.snapshot);
      std::string violation = capacity_violation(w.snapshot);
      ASSERT_EQ(violation, "") << "seed " << seed << " step " << step;
      advance(w, rng, 10 * kMinute, 20);
    }
  }
}

TEST(Invariants, MovesForRoomKeepCapacityAndNeverMoveAJobTwiceOrEvictAMovedOne) {
  PolicyConfig moves;
  moves.max_migrations_per_cycle = 16;
  moves.migrate_gpu_jobs = true;
  moves.move_higher_tiers = true;
  moves.migrate_after_wait = Duration{0};
  size_t moved_in_all = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    World w = random_world(seed, 24, 300);
    std::mt19937_64 rng(seed * 7919);
    for (int step = 0; step < 15; ++step) {
      CycleResult r = run_cycle(w.snapshot, moves);
      ASSERT_TRUE(r.warnings.empty()) << "seed " << seed << ": " << r.warnings[0];
      std::set<JobIndex> moved, evicted;
      for (const auto& p : r.preemptions) evicted.insert(p.victim);
      for (const auto& m : r.migrations) {
        const model::Job& job = w.snapshot.jobs[m.job];
        ASSERT_EQ(job.status.phase, model::JobPhase::kRunning);
        ASSERT_TRUE(job.spec.checkpointable);
        ASSERT_TRUE(moved.insert(m.job).second) << "moved twice in one cycle";
        ASSERT_FALSE(evicted.count(m.job)) << "seed " << seed << ": moved and evicted in one cycle";
        ASSERT_EQ(m.to.size(), 1u);
        ASSERT_NE(w.snapshot.nodes[m.to[0].node].meta.name, job.status.placement[0].node) << "moved onto its own node";
        const Placement* p = placement_of(r, m.for_job);
        ASSERT_NE(p, nullptr) << "a move for a job left waiting";
        EXPECT_NE(std::find(p->after_migrating.begin(), p->after_migrating.end(), m.job), p->after_migrating.end());
      }
      ASSERT_LE(r.migrations.size(), 16u);
      moved_in_all += r.migrations.size();
      apply_decisions(r, w.snapshot);
      ASSERT_EQ(capacity_violation(w.snapshot), "") << "seed " << seed << " step " << step;
      advance(w, rng, 10 * kMinute, 20);
    }
  }
  EXPECT_GT(moved_in_all, 0u) << "the workloads gave moves nothing to do";
}

TEST(Invariants, DrainsEmptyWholeNodesOntoBusyOnesKeepCapacityAndMoveNoJobTwice) {
  PolicyConfig drains;
  drains.max_migrations_per_cycle = 16;
  drains.max_drain_moves_per_cycle = 8;
  drains.migrate_gpu_jobs = true;
  drains.move_higher_tiers = true;
  size_t drained_in_all = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    // A light load, so that cycles often leave no job waiting for room.
    World w = random_world(seed, 24, 40);
    std::mt19937_64 rng(seed * 7919);
    for (int step = 0; step < 15; ++step) {
      const Snapshot before = w.snapshot;
      CycleResult r = run_cycle(w.snapshot, drains);
      ASSERT_TRUE(r.warnings.empty()) << "seed " << seed << ": " << r.warnings[0];
      ASSERT_EQ(run_cycle(w.snapshot, drains).migrations, r.migrations) << "the same snapshot, other drains";
      std::set<std::string> busy_before, drained, targets;
      for (const auto& job : before.jobs) {
        if (job.status.phase != model::JobPhase::kRunning) continue;
        for (const auto& b : job.status.placement) busy_before.insert(b.node);
      }
      // A node a job starts on in this cycle is busy anyway too.
      for (const auto& p : r.placements) {
        for (const auto& g : p.nodes) busy_before.insert(before.nodes[g.node].meta.name);
      }
      std::set<JobIndex> moved, evicted;
      for (const auto& p : r.preemptions) evicted.insert(p.victim);
      int drain_moves = 0;
      for (const auto& m : r.migrations) {
        const model::Job& job = before.jobs[m.job];
        ASSERT_EQ(job.status.phase, model::JobPhase::kRunning);
        ASSERT_TRUE(job.spec.checkpointable);
        ASSERT_TRUE(moved.insert(m.job).second) << "moved twice in one cycle";
        ASSERT_FALSE(evicted.count(m.job)) << "seed " << seed << ": moved and evicted in one cycle";
        ASSERT_EQ(m.to.size(), 1u);
        const std::string& from = job.status.placement[0].node;
        const std::string& to = before.nodes[m.to[0].node].meta.name;
        ASSERT_NE(to, from) << "moved onto its own node";
        for (const auto& e : job.status.events) {
          ASSERT_FALSE((e.type == model::JobEventType::kMigrated || e.type == model::JobEventType::kMigrationRequested) &&
                       before.now - e.time < drains.migration_cooldown)
              << "moved within its cooldown";
        }
        if (m.reason != MoveReason::kDrain) {
          ASSERT_NE(placement_of(r, m.for_job), nullptr) << "a move for a job left waiting";
          continue;
        }
        ++drain_moves;
        drained.insert(from);
        targets.insert(to);
        ASSERT_TRUE(busy_before.count(to)) << "seed " << seed << ": drained onto " << to << ", which runs nothing";
        if (job.spec.estimated_duration) {
          Time end = *job.status.started_at + *job.spec.estimated_duration;
          ASSERT_TRUE(end <= before.now || end - before.now >= drains.power_down_after) << "a job about to end moved";
        }
      }
      ASSERT_LE(drain_moves, 8);
      ASSERT_LE(r.migrations.size(), 16u);
      for (const std::string& node : targets) ASSERT_FALSE(drained.count(node)) << "drained onto a drained node";
      drained_in_all += drained.size();
      apply_decisions(r, w.snapshot);
      ASSERT_EQ(capacity_violation(w.snapshot), "") << "seed " << seed << " step " << step;
      for (const auto& job : w.snapshot.jobs) {
        if (job.status.phase != model::JobPhase::kRunning) continue;
        for (const auto& b : job.status.placement) {
          ASSERT_FALSE(drained.count(b.node)) << "seed " << seed << ": drained node " << b.node << " still runs "
                                              << job.meta.name;
        }
      }
      advance(w, rng, 10 * kMinute, 3);
    }
  }
  EXPECT_GT(drained_in_all, 0u) << "the workloads gave drains nothing to do";
}

TEST(Invariants, SameSnapshotGivesTheSameDecisions) {
  World w = random_world(99, 32, 600);
  std::mt19937_64 rng(5);
  for (int step = 0; step < 5; ++step) {
    CycleResult a = run_cycle(w.snapshot, {});
    CycleResult b = run_cycle(w.snapshot, {});
    ASSERT_EQ(a.placements, b.placements);
    ASSERT_EQ(a.preemptions, b.preemptions);
    ASSERT_EQ(a.reservations, b.reservations);
    ASSERT_EQ(a.repartitions, b.repartitions);
    ASSERT_EQ(a.waiting, b.waiting);
    ASSERT_EQ(a.reasons, b.reasons);
    apply_decisions(a, w.snapshot);
    advance(w, rng, 15 * kMinute, 40);
  }
}

TEST(Invariants, EveryWaitingJobHasAReason) {
  World w = random_world(3, 16, 500);
  CycleResult r = run_cycle(w.snapshot, {});
  size_t pending = 0;
  for (const auto& j : w.snapshot.jobs) pending += j.status.phase == model::JobPhase::kPending ? 1 : 0;
  EXPECT_EQ(r.placements.size() + r.waiting.size(), pending);
  for (const auto& wj : r.waiting) {
    ASSERT_LT(wj.reason, r.reasons.size());
    EXPECT_FALSE(r.reasons[wj.reason].empty());
  }
}

// What a reservation's GPUs and node hold at its start: running jobs expected to still run then
// (jobs without an estimate run for ever) and the other reservations running then. Returns the
// first over-commitment found, or "".
std::string reservation_conflict(const Snapshot& after, const CycleResult& r, const Reservation& res) {
  const model::Node& node = after.nodes[res.node];
  auto end_of = [&](const model::Job& job, Time start) {
    auto est = job.spec.estimated_duration;
    return est ? start + *est : Time::max();
  };
  struct Held {
    int blocks = 0;
    int64_t vram = 0;
    int grants = 0;
  };
  std::map<std::pair<int, int>, Held> held;  // (gpu, mig_start)
  int64_t cpu = 0, mem = 0;
  auto hold = [&](const model::Job& job, int gpu, int mig_start, int blocks, int64_t vram) {
    Held& h = held[{gpu, mig_start}];
    h.blocks += blocks;
    h.vram += vram;
    ++h.grants;
    (void)job;
  };

  for (const auto& job : after.jobs) {
    if (job.status.phase != model::JobPhase::kRunning || end_of(job, *job.status.started_at) <= res.start) continue;
    for (const auto& b : job.status.placement) {
      if (b.node != node.meta.name) continue;
      for (const auto& g : b.gpus) hold(job, g.index, g.mig_start, g.blocks, g.vram_mib);
      cpu += job.spec.cpu_milli * static_cast<int64_t>(b.gpus.size()) / std::max(1, job.spec.gpu.gpu_count);
      mem += job.spec.memory_mib * static_cast<int64_t>(b.gpus.size()) / std::max(1, job.spec.gpu.gpu_count);
    }
  }
  for (const auto& other : r.reservations) {
    if (other.node != res.node || other.start > res.start) continue;
    const model::Job& job = after.jobs[other.job];
    if (other.job != res.job && end_of(job, other.start) <= res.start) continue;
    for (const auto& g : other.gpus) hold(job, g.gpu, g.mig_start, g.blocks, g.vram_mib);
    cpu += job.spec.cpu_milli;
    mem += job.spec.memory_mib;
  }
  for (const auto& g : res.gpus) {
    const model::Gpu& gpu = node.gpus[g.gpu];
    int capacity = model::kBlocksPerGpu;
    int64_t memory = gpu.memory_mib;
    for (const auto& inst : gpu.mig_instances) {
      if (inst.start == g.mig_start) {
        capacity = model::gpu_model(gpu.model).mig_profiles[inst.profile].blocks();
        memory = model::gpu_model(gpu.model).mig_profiles[inst.profile].memory_mib;
      }
    }
    const Held& h = held[{g.gpu, g.mig_start}];
    bool exclusive = g.blocks == capacity;
    if (h.blocks > capacity || h.vram > memory || (exclusive && h.grants > 1)) {
      return "GPU " + std::to_string(g.gpu) + " holds " + std::to_string(h.blocks) + " blocks in " +
             std::to_string(h.grants) + " grants at the reserved start";
    }
  }
  if (cpu > node.cpu_milli || mem > node.memory_mib) return "host CPU or memory over-committed at the start";
  return "";
}

TEST(Invariants, BackfillNeverDelaysAReservation) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    World w = random_world(seed + 1000, 12, 250);
    CycleResult r = run_cycle(w.snapshot, {});
    Snapshot after = w.snapshot;
    apply_decisions(r, after);
    for (const auto& res : r.reservations) {
      ++checked;
      EXPECT_EQ(reservation_conflict(after, r, res), "")
          << "seed " << seed << ": reservation of " << after.jobs[res.job].meta.name << " at "
          << format_rfc3339(res.start) << " on " << after.nodes[res.node].meta.name;
    }
  }
  EXPECT_GT(checked, 20) << "the workloads must produce reservations to check";
}

// A discrete-time run: every minute a cycle, decisions applied, jobs end after their run time.
Time run_until_done(World& w, JobIndex watched, Duration limit) {
  std::mt19937_64 rng(1);
  Time stop = w.snapshot.now + limit;
  while (w.snapshot.now < stop) {
    CycleResult r = run_cycle(w.snapshot, {});
    apply_decisions(r, w.snapshot);
    EXPECT_EQ(capacity_violation(w.snapshot), "");
    advance(w, rng, kMinute, 0);
    if (w.snapshot.jobs[watched].status.phase == model::JobPhase::kSucceeded) {
      return *w.snapshot.jobs[watched].status.started_at + w.actual[watched];
    }
  }
  return Time::max();
}

World flood(int jobs, std::string_view priority_class, bool with_estimates) {
  World w;
  w.snapshot.now = t0();
  for (int i = 0; i < 4; ++i) w.snapshot.nodes.push_back(gpu_node("n" + std::to_string(i)));
  std::mt19937_64 rng(42);
  for (int i = 0; i < jobs; ++i) {
    static const std::vector<std::string> kShapes = {"h100", "h100x2", "h100-50", "h100-25", "h100x4"};
    Duration run{1200 + static_cast<int64_t>(rng() % 6000)};
    JobOptions o{.project = "flood" + std::to_string(i % 3), .priority_class = std::string(priority_class),
                 .submitted_ago = Duration{static_cast<int64_t>(i)}};
    if (with_estimates) o.estimate = run;
    w.snapshot.jobs.push_back(pending_job("f" + std::to_string(i), kShapes[rng() % kShapes.size()], o));
    w.actual.push_back(run);
  }
  return w;
}

TEST(Deadline, DeadlineJobUnderAFloodOfEqualPriorityWorkFinishesInTime) {
  // Same tier: no pre-emption; the reservation and backfill rules alone must get it done.
  World w = flood(400, "dev", true);
  Time deadline = t0() + 4 * kHour;
  w.snapshot.jobs.push_back(pending_job("due", "h100x8", {.project = "flood0", .submitted_ago = Duration{0},
                                                          .estimate = 90 * kMinute, .deadline = deadline}));
  w.actual.push_back(90 * kMinute);
  Time done = run_until_done(w, static_cast<JobIndex>(w.snapshot.jobs.size() - 1), 8 * kHour);
  EXPECT_LE(done, deadline);
}

TEST(Deadline, DeadlineJobUnderAFloodOfLowerPriorityWorkWithoutEstimatesFinishesInTime) {
  // The flood never says when it ends, so no reservation can be computed: pre-emption must do it.
  World w = flood(400, "opportunistic", false);
  Time deadline = t0() + 3 * kHour;
  w.snapshot.jobs.push_back(pending_job("due", "h100x8", {.project = "flood0", .submitted_ago = Duration{0},
                                                          .estimate = 2 * kHour, .deadline = deadline}));
  w.actual.push_back(2 * kHour);
  // Submitted once the flood holds the whole cluster.
  JobIndex due = static_cast<JobIndex>(w.snapshot.jobs.size() - 1);
  w.snapshot.jobs[due].status.phase = model::JobPhase::kCancelled;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 5; ++i) {
    apply_decisions(run_cycle(w.snapshot, {}), w.snapshot);
    advance(w, rng, kMinute, 0);
  }
  w.snapshot.jobs[due].status.phase = model::JobPhase::kPending;
  w.snapshot.jobs[due].status.submitted_at = w.snapshot.now;
  Time done = run_until_done(w, due, 6 * kHour);
  EXPECT_LE(done, deadline);
}

}  // namespace
}  // namespace cnlab::sched
