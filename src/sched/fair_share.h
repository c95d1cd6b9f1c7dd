// Fair share: the order in which projects, and users inside a project, take their next job.
//
// Each project's *effective usage* is its decayed past usage plus what it holds now, counted as
// the usage it will accumulate over the decay's mean life:
//     U = usage(now) + blocks_held * half_life / ln 2
// (a job holding b blocks for ever adds exactly b * half_life / ln 2 to a decayed ledger, so
// the two terms are in the same unit). The project with the lowest U / share goes next; inside it,
// the user with the lowest U / user_share; inside that, the job with the lowest rank (its tier's
// order: the oldest, or the highest response ratio), then the oldest. Every job placed during the
// cycle adds its blocks to its project's and user's U before the next pick (progressive filling),
// so one starved team does not take a whole cycle's free capacity at once.
//
// Why this and not Slurm's: the classic factor 2^(-U/S) is one term in a weighted sum with age and
// size, so fairness depends on weight tuning and a light user of a heavy account can outrank a
// heavy user of a light one. Fair Tree fixes that with a depth-first ranking (the project level
// decides first), which we keep, but it ranks from history only, recomputed every few minutes. Here
// the ranking is lexicographic like Fair Tree's, needs no weights, and sees in-flight allocation,
// which matters with fractional GPUs where one cycle can start hundreds of small jobs.
#pragma once

#include <queue>
#include <string>
#include <tuple>
#include <vector>

#include "sched/job_info.h"
#include "sched/usage_ledger.h"

namespace cnlab::sched {

class FairShareQueue {
 public:
  // Effective usages at the start of the cycle and the weights (> 0), indexed by interned ids.
  // `held_weight` converts held blocks into usage (half_life / ln 2). Ties go to the project that
  // sorts first by name, then to the lower user id.
  FairShareQueue(std::vector<double> project_usage, std::vector<double> project_share, std::vector<double> user_usage,
                 std::vector<double> user_share, double held_weight, const std::vector<std::string>& project_names);

  // Adds a waiting job. Jobs of one user are taken lowest `rank` first, then oldest first (then by
  // index).
  void push(const JobInfo& job, double rank = 0);
  bool empty() const { return heap_.empty(); }
  // The next job in fair-share order. Call charge() for it if it was placed, then pop().
  JobIndex top();
  void pop();
  // Counts `blocks` newly held by the job top() returned against its project and user.
  void charge(const JobInfo& job, int blocks);

 private:
  struct UserQueue {
    uint32_t user = 0;
    std::vector<std::tuple<double, Time, JobIndex>> jobs;  // sorted last first; back() is next
  };
  struct ProjectQueue {
    uint32_t project = 0;
    std::vector<UserQueue> users;  // a heap by user key
  };
  void build();
  bool project_after(uint32_t a, uint32_t b) const;  // heap order: lowest key on top
  bool user_after(const UserQueue& a, const UserQueue& b) const;
  double project_key(uint32_t p) const { return project_usage_[p] / project_share_[p]; }
  double user_key(uint32_t u) const { return user_usage_[u] / user_share_[u]; }

  std::vector<double> project_usage_, project_share_, user_usage_, user_share_;
  double held_weight_;
  const std::vector<std::string>& project_names_;
  std::vector<ProjectQueue> queues_;       // one per project with waiting jobs
  std::vector<uint32_t> queue_of_project_;  // project id -> index in queues_, or UINT32_MAX
  std::vector<uint32_t> heap_;              // indices into queues_
  bool built_ = false;
};

}  // namespace cnlab::sched
