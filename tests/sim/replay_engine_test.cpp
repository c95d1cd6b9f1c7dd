// The replay engine on tiny traces whose outcome is worked out by hand in each test, and its
// accounting on a random trace.
#include "sim/replay_engine.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <random>

#include "sim/policies/cnlab_replay_policy.h"
#include "sim/replay_cluster.h"
#include "sim/replay_report.h"

namespace cnlab::sim {
namespace {

Time at(int64_t seconds) { return trace_time(seconds); }

ReplayTrace trace_of(const std::string& csv) {
  auto trace = parse_replay_trace(csv, "t.csv");
  EXPECT_TRUE(trace) << trace.error().to_string();
  return trace ? std::move(*trace) : ReplayTrace{};
}

std::vector<model::Node> cluster(const std::string& spec) {
  auto nodes = parse_cluster_spec(spec, {});
  EXPECT_TRUE(nodes) << nodes.error().to_string();
  return nodes ? std::move(*nodes) : std::vector<model::Node>{};
}

ReplayRun replay(const ReplayTrace& trace, const std::vector<model::Node>& nodes, std::string_view policy,
                 ReplayOptions options = {}) {
  options.verify = true;
  auto p = make_replay_policy(policy);
  EXPECT_TRUE(p);
  auto run = run_replay(trace, nodes, **p, options);
  EXPECT_TRUE(run) << run.error().to_string();
  return run ? std::move(*run) : ReplayRun{};
}

// Trace jobs are sorted by submit time, so index k is the k-th arrival.
Duration delay(const ReplayTrace& trace, const ReplayRun& run, size_t job) {
  return *run.jobs[job].first_start - trace.jobs[job].submit;
}

TEST(ReplayEngine, FifoMakesAShortJobWaitBehindALongOneWhileCnlabSharesTheGpu) {
  // One H100. A (half a GPU, 1000 s) at 0; B (half a GPU, 100 s) at 20.
  ReplayTrace trace = trace_of("submit_time,duration,num_gpus,gpu_share\n0,1000,1,0.5\n20,100,1,0.5\n");
  auto nodes = cluster("1:h100x1");
  // fifo gives A the whole GPU; B starts when A ends at 1000 and ends at 1100.
  ReplayRun fifo = replay(trace, nodes, "fifo");
  EXPECT_EQ(fifo.jobs[1].first_start, at(1000));
  EXPECT_EQ(fifo.jobs[1].end, at(1100));
  EXPECT_EQ(delay(trace, fifo, 1), Duration{980});
  // cnlab puts B beside A at once (the cycle at 20): it ends at 120.
  ReplayRun cnlab = replay(trace, nodes, "cnlab");
  EXPECT_EQ(cnlab.jobs[1].first_start, at(20));
  EXPECT_EQ(cnlab.jobs[1].end, at(120));
  EXPECT_EQ(cnlab.jobs[0].end, at(1000));
  // While A runs alone, fifo's allocation is the whole GPU and its utilization half of it.
  bool seen = false;
  for (const ReplaySample& s : fifo.samples) {
    if (s.at > at(0) && s.at < at(1000)) {
      EXPECT_DOUBLE_EQ(s.allocation, 1.0);
      EXPECT_DOUBLE_EQ(s.utilization, 0.5);
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
  // Time-weighted: fifo holds the GPU 0..1100 of 1100 s; the jobs asked 0.5 x 1100 s.
  EXPECT_DOUBLE_EQ(fifo.mean_allocation(), 1.0);
  EXPECT_DOUBLE_EQ(fifo.mean_utilization(), 0.5);
  // cnlab: 0.5 x 1000 + 0.5 x 100 over 1000 s.
  EXPECT_DOUBLE_EQ(cnlab.mean_utilization(), 0.55);
}

TEST(ReplayEngine, InferencePreemptsOpportunisticUnderCnlabButWaitsUnderFifo) {
  ReplayTrace trace = trace_of(
      "submit_time,duration,num_gpus,gpu_share,model,project,class\n"
      "0,1000,1,,,p,opportunistic\n"
      "100,100,1,,,p,inference\n");
  auto nodes = cluster("1:h100x1");
  ReplayRun fifo = replay(trace, nodes, "fifo");
  EXPECT_EQ(fifo.jobs[1].first_start, at(1000));
  EXPECT_EQ(fifo.preemptions, 0u);
  // cnlab: the inference job evicts the opportunistic one at 100 and runs 100..200. The victim had
  // no checkpoint yet (one every 30m), so it starts over at 200 and ends at 1200.
  ReplayRun cnlab = replay(trace, nodes, "cnlab");
  EXPECT_EQ(cnlab.jobs[1].first_start, at(100));
  EXPECT_EQ(cnlab.jobs[1].end, at(200));
  EXPECT_EQ(cnlab.preemptions, 1u);
  EXPECT_EQ(cnlab.jobs[0].preemptions, 1u);
  EXPECT_EQ(cnlab.jobs[0].lost, Duration{100});
  EXPECT_EQ(cnlab.jobs[0].first_start, at(0));
  EXPECT_EQ(cnlab.jobs[0].end, at(1200));
  EXPECT_EQ(cnlab.jobs[0].ran, Duration{1100});
}

TEST(ReplayEngine, AMoveFreesANodeForAWaitingGangAndCostsTheMoverItsPause) {
  // Two nodes of two H100s. Two long opportunistic jobs and a short one arrive at 0 (two per
  // node); the short one ends at 50, leaving one free GPU on each node. A dev job asking for two
  // GPUs arrives at 100 (dev may not pre-empt): without moves it waits for a long job to end
  // (10000); with them one long job moves beside the other and the pair starts at once.
  ReplayTrace trace = trace_of(
      "submit_time,duration,num_gpus,gpu_share,model,project,class\n"
      "0,10000,1,,,p,opportunistic\n"
      "0,50,1,,,p,opportunistic\n"
      "0,10000,1,,,p,opportunistic\n"
      "100,100,2,,,p,dev\n");
  auto nodes = cluster("2:h100x2");
  ReplayRun plain = replay(trace, nodes, "cnlab");
  ASSERT_TRUE(plain.jobs[3].first_start);
  EXPECT_GE(*plain.jobs[3].first_start, at(10000));
  EXPECT_EQ(plain.migrations, 0u);

  sched::PolicyConfig config;
  config.max_migrations_per_cycle = 8;
  config.migrate_gpu_jobs = true;
  config.migration_pause_base = std::chrono::milliseconds(2500);
  CnlabReplayPolicy moves(config, "cnlab+moves");
  ReplayOptions options;
  options.verify = true;
  auto run = run_replay(trace, nodes, moves, options);
  ASSERT_TRUE(run) << run.error().to_string();
  EXPECT_EQ(run->policy, "cnlab+moves");
  EXPECT_EQ(run->jobs[3].first_start, at(100));
  EXPECT_EQ(run->jobs[3].end, at(200));
  ASSERT_EQ(run->migrations, 1u);
  EXPECT_EQ(run->migration_pause, std::chrono::milliseconds(2500));
  // The mover keeps its progress and ends its pause (rounded up to 3 s) later; the other does not.
  const size_t mover = run->jobs[0].migrations == 1 ? 0 : 2, other = 2 - mover;
  EXPECT_EQ(run->jobs[mover].migrations, 1u);
  EXPECT_EQ(run->jobs[mover].end, at(10003));
  EXPECT_EQ(run->jobs[mover].preemptions, 0u);
  EXPECT_EQ(run->jobs[other].end, at(10000));
  EXPECT_EQ(run->preemptions, 0u);
}

TEST(ReplayEngine, ADrainEmptiesANodeWhenNothingWaitsAndTheNodeCountsAsOffFromThen) {
  // Two nodes of four H100s, each filled at 0 by a short three-GPU job and a long one-GPU job. At
  // 50 the short ones end and nothing waits: with drains, one long job joins the other and its
  // node runs nothing from 50 (off from 50 + 30m); without, both run until 10000.
  ReplayTrace trace = trace_of(
      "submit_time,duration,num_gpus\n"
      "0,50,3\n0,10000,1\n0,50,3\n0,10000,1\n");
  auto nodes = cluster("2:h100x4");
  ReplayRun plain = replay(trace, nodes, "cnlab");
  EXPECT_EQ(plain.migrations, 0u);
  EXPECT_EQ(plain.power_down_node_seconds, 0.0);

  sched::PolicyConfig config;
  config.max_migrations_per_cycle = 8;
  config.max_drain_moves_per_cycle = 4;
  config.migrate_gpu_jobs = true;
  CnlabReplayPolicy drains(config, "cnlab+drains");
  EXPECT_TRUE(drains.decides_with_nothing_waiting());
  ReplayOptions options;
  options.verify = true;
  auto run = run_replay(trace, nodes, drains, options);
  ASSERT_TRUE(run) << run.error().to_string();
  ASSERT_EQ(run->migrations, 1u);
  EXPECT_EQ(run->drain_moves, 1u);
  // The mover ends its 1 s pause later, at 10001: one node was off for 10001 - 50 - 1800 s.
  const size_t mover = run->jobs[1].migrations == 1 ? 1 : 3;
  EXPECT_EQ(run->jobs[mover].end, at(10001));
  EXPECT_EQ(run->power_down_node_seconds, 10001.0 - 50 - 1800);
}

TEST(ReplayEngine, CheckpointableVictimResumesFromItsLastCheckpoint) {
  ReplayTrace trace = trace_of(
      "submit_time,duration,num_gpus,gpu_share,model,project,class\n"
      "0,1000,1,,,p,opportunistic\n"
      "100,100,1,,,p,inference\n");
  auto nodes = cluster("1:h100x1");
  ReplayOptions options;
  options.checkpoint_every = Duration{60};
  // Checkpoint at 60: 40 s lost, 940 s left from 200: ends at 1140.
  ReplayRun resumed = replay(trace, nodes, "cnlab", options);
  EXPECT_EQ(resumed.jobs[0].lost, Duration{40});
  EXPECT_EQ(resumed.jobs[0].end, at(1140));
  // Not checkpointable: everything is lost.
  options.checkpointable = {CheckpointRule::Kind::kClasses, {"dev"}};
  ReplayRun restarted = replay(trace, nodes, "cnlab", options);
  EXPECT_EQ(restarted.jobs[0].lost, Duration{100});
  EXPECT_EQ(restarted.jobs[0].end, at(1200));
}

TEST(ReplayEngine, DeadlineJobMeetsItsDeadlineUnderCnlabAndMissesUnderFifo) {
  // One GPU busy with X until 100. A (200 s) arrives at 10, D (100 s, deadline 250) at 20.
  ReplayTrace trace = trace_of(
      "submit_time,duration,num_gpus,gpu_share,model,project,class,deadline\n"
      "0,100,1,,,p,dev,\n"
      "10,200,1,,,p,dev,\n"
      "20,100,1,,,p,dev,250\n");
  auto nodes = cluster("1:h100x1");
  // fifo runs the older A first (100..300), so D runs 300..400 and misses 250.
  ReplayRun fifo = replay(trace, nodes, "fifo");
  EXPECT_EQ(fifo.jobs[1].first_start, at(100));
  EXPECT_EQ(fifo.jobs[2].end, at(400));
  // cnlab takes D first (its latest start, 150, is within the urgency window): 100..200, then A.
  ReplayRun cnlab = replay(trace, nodes, "cnlab");
  EXPECT_EQ(cnlab.jobs[2].first_start, at(100));
  EXPECT_EQ(cnlab.jobs[2].end, at(200));
  EXPECT_EQ(cnlab.jobs[1].end, at(400));
  EXPECT_EQ(cnlab.preemptions, 0u);
  EXPECT_EQ(summarize_run(trace, fifo).deadline_met, 0u);
  EXPECT_EQ(summarize_run(trace, cnlab).deadline_met, 1u);
}

TEST(ReplayEngine, WaitingPreemptorIsWokenWhenTheVictimsMinimumRunTimePasses) {
  // A dev job is protected for its tier's 10 minutes; the production job arriving at 60 may evict
  // it at 600, though nothing arrives or ends then.
  ReplayTrace trace = trace_of(
      "submit_time,duration,num_gpus,gpu_share,model,project,class\n"
      "0,5000,1,,,p,dev\n"
      "60,100,1,,,p,production\n");
  ReplayRun cnlab = replay(trace, cluster("1:h100x1"), "cnlab");
  EXPECT_EQ(cnlab.jobs[1].first_start, at(600));
  EXPECT_EQ(cnlab.jobs[0].end, at(700 + 5000));
  EXPECT_GE(cnlab.wake_ups, 1u);
}

TEST(ReplayEngine, CyclesAreCoalescedToOnePerInterval) {
  // Plenty of room. The first arrival gets a cycle at once; those within the next 10 s wait for
  // the interval's end; one after a quiet stretch gets a cycle at once again.
  ReplayTrace trace = trace_of("submit_time,duration,num_gpus\n0,50,1\n3,50,1\n9,50,1\n10,50,1\n100,50,1\n105,50,1\n");
  for (std::string_view policy : {"fifo", "cnlab"}) {
    ReplayRun run = replay(trace, cluster("1:h100x8"), policy);
    std::vector<int64_t> starts;
    for (const JobOutcome& o : run.jobs) starts.push_back(trace_seconds(*o.first_start));
    EXPECT_EQ(starts, (std::vector<int64_t>{0, 10, 10, 10, 100, 110})) << policy;
    EXPECT_EQ(run.cycles, 4u) << policy;
  }
  ReplayOptions slow;
  slow.cycle_interval = Duration{60};
  ReplayRun run = replay(trace, cluster("1:h100x8"), "fifo", slow);
  std::vector<int64_t> starts;
  for (const JobOutcome& o : run.jobs) starts.push_back(trace_seconds(*o.first_start));
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 60, 60, 60, 120, 120}));
}

TEST(ReplayEngine, SamplesComeAtEveryCycleAndOnTheGrid) {
  ReplayTrace trace = trace_of("submit_time,duration,num_gpus\n0,1000,1\n");
  ReplayOptions options;
  options.sample_every = Duration{300};
  ReplayRun run = replay(trace, cluster("1:h100x2"), "fifo", options);
  std::vector<int64_t> times;
  for (const ReplaySample& s : run.samples) times.push_back(trace_seconds(s.at));
  EXPECT_EQ(times, (std::vector<int64_t>{0, 300, 600, 900, 1000}));
  EXPECT_DOUBLE_EQ(run.samples[1].allocation, 0.5);
  EXPECT_EQ(run.samples[1].running, 1u);
  EXPECT_EQ(run.samples.back().running, 0u);
}

TEST(ReplayEngine, IdleNodesCountAsPowerDownHours) {
  // Two nodes; one 2 h job on the first from t=0. The second node is idle for 2 h: 1.5 h could
  // have been off. The first node never idles before the end.
  ReplayTrace trace = trace_of("submit_time,duration,num_gpus\n0,7200,1\n");
  ReplayRun run = replay(trace, cluster("2:h100x1"), "fifo");
  EXPECT_EQ(run.end, at(7200));
  EXPECT_DOUBLE_EQ(run.power_down_node_seconds, 5400);
  EXPECT_EQ(run.nodes_ever_off, 1u);
}

// Every job that arrives finishes or is still waiting at the end; blocks never exceed capacity;
// cnlab grants what was asked, fifo at least that.
TEST(ReplayEngine, AccountingHoldsOnARandomTrace) {
  std::mt19937_64 rng(7);
  std::string csv = "submit_time,duration,num_gpus,gpu_share,model,project,class,deadline\n";
  const char* classes[] = {"inference", "production", "dev", "opportunistic"};
  const char* projects[] = {"vision", "nlp", "speech"};
  for (int i = 0; i < 300; ++i) {
    int submit = static_cast<int>(rng() % 20000);
    int duration = 30 + static_cast<int>(rng() % 3000);
    int kind = static_cast<int>(rng() % 4);
    std::string gpus = kind == 0 ? fmt::format("1,0.{}", 1 + rng() % 9) : kind == 1 ? "1," : kind == 2 ? "4," : "0,";
    // A 4-GPU gang of L4s could never start on this cluster (two L4s in all).
    std::string model = kind < 2 && rng() % 5 == 0 ? "l4" : "";
    std::string deadline = rng() % 6 == 0 ? std::to_string(submit + duration + static_cast<int>(rng() % 4000)) : "";
    csv += fmt::format("{},{},{},{},{},{},{}\n", submit, duration, gpus, model, projects[rng() % 3], classes[rng() % 4],
                       deadline);
  }
  csv += "50,100,1,,h200,vision,dev,\n";  // no h200 in the cluster: never starts
  ReplayTrace trace = trace_of(csv);
  auto nodes = cluster("2:h100x4,1:l4x2");
  for (std::string_view policy : {"fifo", "cnlab"}) {
    ReplayOptions options;
    options.checkpoint_every = Duration{600};
    ReplayRun run = replay(trace, nodes, policy, options);
    ASSERT_EQ(run.jobs.size(), trace.jobs.size());
    size_t never = 0;
    for (size_t j = 0; j < trace.jobs.size(); ++j) {
      const JobOutcome& o = run.jobs[j];
      if (!o.first_start) {
        ++never;
        EXPECT_EQ(model::format_model_mask(trace.jobs[j].spec.gpu.models), "h200") << policy;
        continue;
      }
      ASSERT_TRUE(o.end) << policy << " job " << j;
      EXPECT_GE(*o.first_start, trace.jobs[j].submit);
      EXPECT_EQ(o.ran - o.lost, trace.jobs[j].run_time) << policy << " job " << j;
      EXPECT_GE(*o.end - *o.first_start, trace.jobs[j].run_time);
    }
    EXPECT_EQ(never, 1u) << policy;
    for (const ReplaySample& s : run.samples) {
      EXPECT_LE(s.allocation, 1.0 + 1e-12) << policy;
      EXPECT_GE(s.allocation + 1e-12, s.utilization) << policy;
      if (policy == "cnlab") {
        EXPECT_DOUBLE_EQ(s.allocation, s.utilization);
      }
    }
    EXPECT_EQ(run.samples.back().pending, 1u) << policy;
    EXPECT_EQ(run.samples.back().running, 0u) << policy;
    if (policy == "fifo") {
      EXPECT_EQ(run.preemptions, 0u);
    }
  }
}

TEST(ReplayEngine, SameInputSameOutcome) {
  ReplayTrace trace = trace_of(
      "submit_time,duration,num_gpus,gpu_share,model,project,class\n"
      "0,500,1,0.3,,a,dev\n0,400,1,0.6,,b,dev\n5,300,1,,,a,production\n7,50,2,,,b,opportunistic\n");
  auto nodes = cluster("1:h100x2");
  ReplayRun first = replay(trace, nodes, "cnlab"), second = replay(trace, nodes, "cnlab");
  for (size_t j = 0; j < trace.jobs.size(); ++j) {
    EXPECT_EQ(first.jobs[j].first_start, second.jobs[j].first_start);
    EXPECT_EQ(first.jobs[j].end, second.jobs[j].end);
  }
  EXPECT_EQ(first.samples.size(), second.samples.size());
}

TEST(ReplayEngine, CheckpointRuleParsesAllNoneAndClasses) {
  EXPECT_EQ(parse_checkpoint_rule("all", "f")->kind, CheckpointRule::Kind::kAll);
  EXPECT_EQ(parse_checkpoint_rule(" None ", "f")->kind, CheckpointRule::Kind::kNone);
  auto classes = parse_checkpoint_rule("dev,opportunistic,dev", "f");
  ASSERT_TRUE(classes);
  EXPECT_EQ(classes->to_string(), "dev,opportunistic");
  EXPECT_TRUE(classes->applies("dev"));
  EXPECT_FALSE(classes->applies("inference"));
  auto bad = parse_checkpoint_rule("dev,batch", "--checkpointable");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "--checkpointable");
  EXPECT_NE(bad.error().message.find("\"batch\" is not a priority class"), std::string::npos);
}

}  // namespace
}  // namespace cnlab::sim
