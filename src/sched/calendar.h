// The capacity calendar: resources held for reserved jobs from their start time, and the check
// that keeps backfill from delaying them. Private to src/sched.
//
// A hold records, for each partition and for the node's CPU and memory, its *slack*: how much
// would still be free at the reserved start once the reserved job has what it needs. Free capacity
// only grows as running jobs end, so the start is the tightest moment of the hold; any later job
// that would still be running then must fit in the slack, and is charged to it.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "sched/cluster_state.h"
#include "sched/job_shape.h"

namespace cnlab::sched {

struct HoldPart {
  uint32_t partition = 0;
  int need_blocks = 0;
  int64_t need_mem = 0;
  int slack_blocks = 0;
  int64_t slack_mem = 0;
};

struct Hold {
  JobIndex job = 0;
  uint32_t node = 0;
  Time start{}, end = kNever;
  int64_t need_cpu = 0, need_mem = 0;
  int64_t slack_cpu = 0, slack_mem = 0;
  std::vector<HoldPart> parts;
};

// Where and when a job could start at the earliest, with what it would use there.
struct EarliestStart {
  uint32_t node = 0;
  Time start{};
  std::vector<PartUse> uses;
  int64_t cpu = 0, mem = 0;
};

class Calendar {
 public:
  explicit Calendar(uint32_t node_count) : by_node_(node_count) {}

  const std::vector<uint32_t>& holds_on(uint32_t node) const { return by_node_[node]; }

  // Whether a job using `uses`, `cpu` and `mem` on `node` during [from, to) leaves every hold it
  // overlaps what that hold needs.
  bool allows(uint32_t node, Time from, Time to, int64_t cpu, int64_t mem, std::span<const PartUse> uses) const;
  // Takes such a job's use out of the slack of the holds it overlaps (call after allows()).
  void charge(uint32_t node, Time from, Time to, int64_t cpu, int64_t mem, std::span<const PartUse> uses);
  // The first hold on `node` that forbids the use, for explanations; nullptr when none does.
  const Hold* blocking_hold(uint32_t node, Time from, Time to, int64_t cpu, int64_t mem,
                            std::span<const PartUse> uses) const;

  // The earliest time at or after `now` when a single-node shape fits somewhere, given the running
  // jobs' expected ends and the holds already made; nullopt when it never does (e.g. the capacity
  // it needs is held by jobs without an estimated end). `fits_now_possible` false says the caller
  // already knows it fits nowhere now, even ignoring reservations, so `now` itself is not tried.
  std::optional<EarliestStart> earliest_start(const ClusterState& state, const JobShape& shape, Duration duration,
                                              Time now, bool fits_now_possible = true) const;
  // Holds what `start` describes for `job` during [start.start, end), charging overlapped holds.
  void reserve(const ClusterState& state, JobIndex job, const EarliestStart& start, Time end);

 private:
  std::vector<Hold> holds_;
  std::vector<std::vector<uint32_t>> by_node_;
};

// Saturating addition for end times (kNever stays kNever).
inline Time end_after(Time start, Duration duration) {
  return duration.count() <= 0 || start > kNever - duration ? kNever : start + duration;
}

}  // namespace cnlab::sched
