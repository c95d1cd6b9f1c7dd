// The shape of the workload, learned from the jobs that have arrived: which requests are common.
// The packing scorer keeps capacity usable for them. Nothing here reads a trace ahead of time: the
// scheduler feeds it the jobs of its snapshot, the simulator each job as it arrives.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sched/job_shape.h"

namespace cnlab::sched {

struct TypicalShape {
  JobShape shape;             // host memory is not part of the key: requests differ in it more than in the rest
  double weight = 0;          // share of the arrived jobs, renormalised over the typical shapes
  double inverse_memory = 0;  // 1 / the mean host memory (MiB) its jobs asked for; 0 when none did
};

class WorkloadProfile {
 public:
  // The typical shapes are the most common ones that together cover this share of the jobs (as FGD
  // chooses its typical pods).
  static constexpr double kCoverage = 0.95;
  // ...but no more than this many, so scoring stays cheap on workloads of many distinct shapes.
  static constexpr size_t kMaxTypical = 32;

  void add(const JobShape& shape, uint64_t jobs = 1);
  // Jobs added so far: grows with every add, so it keys anything derived from the weights.
  uint64_t jobs() const { return total_; }
  // Host CPU (milli) that GPU jobs ask per 1% block, on average over the arrived GPU jobs; 0 before any.
  double cpu_per_block() const { return gpu_blocks_ ? cpu_of_gpu_jobs_ / gpu_blocks_ : 0; }
  // The same for host memory (MiB per block).
  double memory_per_block() const { return gpu_blocks_ ? memory_of_gpu_jobs_ / gpu_blocks_ : 0; }
  // The typical shapes in a fixed order of their keys; a pure function of the counts so far.
  const std::vector<TypicalShape>& typical() const;
  // Grows when the set of typical shapes changes (not their weights): caches of per-shape values
  // stay valid while it stays the same.
  uint64_t version() const {
    (void)typical();
    return version_;
  }

 private:
  struct Entry {
    JobShape shape;
    uint64_t count = 0;
    double memory_mib = 0;  // summed over its jobs
  };
  static bool before(const Entry& a, const Entry& b);  // more common first, then by key

  std::vector<Entry> entries_;  // in order of first arrival
  std::unordered_map<JobShape, size_t, JobShapeHash> index_;
  uint64_t total_ = 0;
  double cpu_of_gpu_jobs_ = 0, memory_of_gpu_jobs_ = 0, gpu_blocks_ = 0;
  mutable bool dirty_ = false;
  mutable uint64_t version_ = 0;
  mutable std::vector<TypicalShape> typical_;
};

}  // namespace cnlab::sched
