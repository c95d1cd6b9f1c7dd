// The replay experiment's engine: time moves, jobs arrive, queue, run for their run time and
// leave, and a ReplayPolicy decides every scheduling cycle.
//
// Events and cycles
//  * Events are arrivals (a job's submit time) and completions (start + remaining run time).
//    Completions are handled before arrivals at the same second.
//  * A cycle runs when something changed (an arrival, a completion, or a wake-up the policy asked
//    for) and jobs are waiting, but at most once per `cycle_interval` of simulated time: a change
//    within the interval after a cycle waits for the interval's end, so a burst of arrivals is
//    decided in one cycle and long traces stay fast. The first change after a quiet interval gets
//    a cycle at once. No cycle runs while nothing waits.
//  * Decisions are applied with sched::apply_decisions. A placed job ends at start + remaining run
//    time. A pre-empted job returns to pending: a checkpointable one keeps the work done up to its
//    last checkpoint (one every `checkpoint_every` of run time since it last started), any other
//    loses all of it; what it lost counts as lost work.
//  * A migration (the policy moves a running job live) keeps the job's progress: it runs on at its
//    new place and ends the decision's pause later; its estimate grows by the pause too.
//  * Estimates are perfect: estimated_duration is always the job's remaining run time.
//  * Fair share: the usage ledger gets, before each cycle, the block-seconds (requested blocks x
//    seconds running) every project's and user's jobs accumulated since the previous one.
//
// The snapshot is kept incremental: a job enters it once at arrival (its strings built then),
// finished jobs are marked Succeeded (run_cycle ignores them) and compacted away in bulk.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/common.h"
#include "model/model.h"
#include "sim/replay_policy.h"
#include "sim/replay_trace.h"

namespace cnlab::sim {

// Which jobs can resume from a checkpoint after pre-emption: all, none, or those of named classes.
struct CheckpointRule {
  enum class Kind { kAll, kNone, kClasses };
  Kind kind = Kind::kAll;
  std::vector<std::string> classes;

  bool applies(const std::string& priority_class) const;
  std::string to_string() const;  // "all", "none", "dev,opportunistic"
};
// "all", "none", or a comma list of priority class names; errors name `field` and the classes.
Result<CheckpointRule> parse_checkpoint_rule(std::string_view text, std::string_view field);

struct ReplayOptions {
  Duration cycle_interval{10};
  Duration sample_every = 5 * kMinute;
  Duration checkpoint_every = 30 * kMinute;
  Duration power_down_after = 30 * kMinute;
  CheckpointRule checkpointable;
  // For the report: the scheduler settings cnlab ran with (empty: the defaults), and how a policy
  // that moves jobs was set up (empty: none does).
  std::string scheduler_settings;
  std::string migration_settings;
  // Check after every cycle that no GPU, CPU or memory is over-committed (for tests; costs a scan).
  bool verify = false;
  // Called now and then with the events (arrivals and completions) handled so far.
  std::function<void(uint64_t events)> progress;
};

struct ReplaySample {
  Time at{};
  double allocation = 0;   // blocks granted / blocks the cluster has, 0..1
  double utilization = 0;  // blocks the running jobs asked for / blocks the cluster has
  uint32_t pending = 0, running = 0;
  uint32_t nodes_on = 0;  // running a job, or idle for less than power_down_after
};

struct JobOutcome {
  std::optional<Time> first_start, end;  // end: when it finished
  uint32_t preemptions = 0;
  Duration ran{0};   // seconds it held its GPUs, over all its runs (lost work included)
  Duration lost{0};  // run time thrown away by pre-emptions
  uint32_t migrations = 0;  // live moves (each paused it)
};

struct ReplayRun {
  std::string policy;
  Time start{}, end{};  // the first arrival; the last event
  int64_t capacity_blocks = 0;
  size_t nodes = 0;
  std::vector<JobOutcome> jobs;  // by index in the trace
  std::vector<ReplaySample> samples;
  double allocated_block_seconds = 0;  // integral of blocks granted over [start, end]
  double requested_block_seconds = 0;  // integral of blocks asked by running jobs
  double power_down_node_seconds = 0;
  size_t nodes_ever_off = 0;
  uint64_t preemptions = 0, cycles = 0, wake_ups = 0;
  uint64_t migrations = 0;
  uint64_t drain_moves = 0;  // of the migrations, those that emptied a node for power-down
  std::chrono::milliseconds migration_pause{0};  // the pauses of all migrations, added up
  double wall_seconds = 0;
  std::vector<std::string> warnings;  // distinct warnings of the policy's cycles, at most 20

  double mean_allocation() const;   // time-weighted, 0..1
  double mean_utilization() const;
};

// Arrivals plus completions without pre-emption: the total progress() counts towards.
inline uint64_t replay_event_count(const ReplayTrace& trace) { return 2 * trace.jobs.size(); }

// Replays `trace` on `nodes` under `policy`. Fails (kInternal) when the policy decides something
// impossible (placing a job that is not waiting, a grant on a GPU that does not exist) or, with
// options.verify, over-commits the hardware.
Result<ReplayRun> run_replay(const ReplayTrace& trace, const std::vector<model::Node>& nodes, ReplayPolicy& policy,
                             const ReplayOptions& options);

}  // namespace cnlab::sim
