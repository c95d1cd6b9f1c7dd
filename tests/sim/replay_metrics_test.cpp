#include "sim/replay_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sim/replay_report.h"

namespace cnlab::sim {
namespace {

Time at(int64_t seconds) { return trace_time(seconds); }

TEST(ReplayMetrics, PercentilesAreNearestRank) {
  std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(percentile(ten, 50), 5);   // ceil(5) = 5th value
  EXPECT_EQ(percentile(ten, 99), 10);  // ceil(9.9) = 10th
  EXPECT_EQ(percentile(ten, 10), 1);
  EXPECT_EQ(percentile(ten, 11), 2);
  EXPECT_EQ(percentile(ten, 0), 1);
  EXPECT_EQ(percentile(ten, 100), 10);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_EQ(percentile(hundred, 99), 99);
  EXPECT_EQ(percentile(hundred, 50), 50);
  EXPECT_TRUE(std::isnan(percentile(std::vector<double>{}, 50)));
}

TEST(ReplayMetrics, SummarizeSortsAndAverages) {
  Stats s = summarize({30, 10, 20, 1000});
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.mean, 265);
  EXPECT_EQ(s.p50, 20);
  EXPECT_EQ(s.p99, 1000);
  EXPECT_TRUE(std::isnan(summarize({}).p50));
}

TEST(ReplayMetrics, JainIndexIsOneWhenEqualAndOneOverNWhenOneTakesAll) {
  EXPECT_DOUBLE_EQ(jain_index(std::vector<double>{0.5, 0.5, 0.5, 0.5}), 1.0);
  EXPECT_DOUBLE_EQ(jain_index(std::vector<double>{1, 0, 0, 0}), 0.25);
  // (1 + 0.5)^2 / (2 * (1 + 0.25)) = 2.25 / 2.5
  EXPECT_DOUBLE_EQ(jain_index(std::vector<double>{1, 0.5}), 0.9);
  EXPECT_DOUBLE_EQ(jain_index(std::vector<double>{0.3}), 1.0);
  EXPECT_DOUBLE_EQ(jain_index(std::vector<double>{0, 0}), 1.0);
  EXPECT_TRUE(std::isnan(jain_index(std::vector<double>{})));
}

TEST(ReplayMetrics, PowerDownCountsIdleStretchesBeyondTheDelay) {
  // Two nodes from t=0, power-down after 30 minutes.
  PowerDownMeter meter(2, at(0), 30 * kMinute);
  // Node 0 busy 0..1h, idle 1h..4h (2.5h could be off), busy 4h..5h, idle 5h..5h10m (too short).
  meter.job_started(0, at(0));
  EXPECT_EQ(meter.nodes_on(at(1799)), 2u);
  EXPECT_EQ(meter.nodes_on(at(1800)), 1u);  // node 1 has been idle for the whole delay: off
  meter.job_left(0, at(3600));
  meter.job_started(0, at(4 * 3600));
  meter.job_left(0, at(5 * 3600));
  // Node 1: two jobs overlapping 2h..3h and 2h30m..6h, so idle 0..2h (1.5h off) and 6h..end.
  meter.job_started(1, at(2 * 3600));
  meter.job_started(1, at(2 * 3600 + 1800));
  meter.job_left(1, at(3 * 3600));
  EXPECT_FALSE(meter.idle(1));
  meter.job_left(1, at(6 * 3600));
  meter.finish(at(6 * 3600 + 600));  // node 0 idle 5h..6h10m: 40m off; node 1 idle 10m: none
  EXPECT_DOUBLE_EQ(meter.off_seconds(), 2.5 * 3600 + 1.5 * 3600 + 40 * 60);
  EXPECT_EQ(meter.nodes_ever_off(), 2u);
}

TEST(ReplayMetrics, ServiceRatiosAndJainFromOutcomes) {
  // Two projects, one whole GPU each job. "a" ran at once (ratio 1); "b" waited 100 s and ran 100 s
  // (ratio 0.5); a host-only job of "c" counts for nothing.
  ReplayTrace trace;
  auto job = [](std::string project, int64_t submit, int64_t run, model::SliceKind kind) {
    ReplayJob j;
    j.name = project;
    j.spec.project = project;
    j.spec.gpu.kind = kind;
    if (kind == model::SliceKind::kNone) j.spec.gpu = {model::SliceKind::kNone, 0, 0, 0, -1, std::nullopt};
    j.submit = at(submit);
    j.run_time = Duration{run};
    return j;
  };
  trace.jobs = {job("a", 0, 100, model::SliceKind::kWhole), job("b", 0, 100, model::SliceKind::kWhole),
                job("c", 0, 50, model::SliceKind::kNone)};
  trace.jobs[1].spec.deadline = at(150);
  ReplayRun run;
  run.start = at(0);
  run.end = at(200);
  run.jobs.resize(3);
  run.jobs[0] = {at(0), at(100), 0, Duration{100}, Duration{0}};
  run.jobs[1] = {at(100), at(200), 0, Duration{100}, Duration{0}};
  run.jobs[2] = {at(0), at(50), 0, Duration{50}, Duration{0}};
  RunSummary s = summarize_run(trace, run);
  ASSERT_EQ(s.service_ratio.size(), 2u);
  EXPECT_EQ(s.service_ratio[0].first, "a");
  EXPECT_DOUBLE_EQ(s.service_ratio[0].second, 1.0);
  EXPECT_DOUBLE_EQ(s.service_ratio[1].second, 0.5);
  EXPECT_DOUBLE_EQ(s.jain, 0.9);
  EXPECT_EQ(s.deadline_jobs, 1u);
  EXPECT_EQ(s.deadline_met, 0u);
  EXPECT_EQ(s.delay.p99, 100);
  EXPECT_EQ(s.completion.p50, 100);
  EXPECT_EQ(s.finished, 3u);
  ASSERT_EQ(s.by_project.size(), 3u);
  EXPECT_EQ(s.by_project[1].group, "b");
  EXPECT_EQ(s.by_project[1].delay.mean, 100);
}

TEST(ReplayMetrics, SecondsReadAsPeopleWriteThem) {
  EXPECT_EQ(format_seconds(0), "0s");
  EXPECT_EQ(format_seconds(0.5), "0.5s");
  EXPECT_EQ(format_seconds(119), "119s");
  EXPECT_EQ(format_seconds(150), "2.5m");
  EXPECT_EQ(format_seconds(3 * 3600), "3.0h");
  EXPECT_EQ(format_seconds(3 * 86400), "3.0d");
  EXPECT_EQ(format_seconds(std::nan("")), "-");
}

}  // namespace
}  // namespace cnlab::sim
