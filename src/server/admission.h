// Admission: what is refused before a job is stored (with the reason), and the quota ledger that
// keeps each project's and user's usage up to date incrementally from the cache.
//
// Usage counts jobs that are not finished (Pending, Scheduled, Running): their number, their blocks
// (a whole GPU is 100), and their blocks per model where the job names one model. GPU-hours count
// the run time of every job inside the quota's rolling window, at blocks/100 GPUs.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "model/model.h"
#include "sched/policy_config.h"
#include "server/object_cache.h"

namespace cnlab::server {

class QuotaLedger {
 public:
  // Keeps the contribution of job `id` in line with the cache (call from a cache listener).
  void observe(const std::string& id, const model::Job* job);

  struct Admitted {
    bool borrowing = false;  // over quota, admitted as pre-emptible (opportunistic)
    std::string note;        // why, for the job's events
  };
  // Checks every quota that applies to `job` and, when it may go in, counts it at once so that
  // concurrent submissions cannot both take the last of a quota. `release` undoes this when the
  // job is not stored after all. kFailedPrecondition names the quota, the resource, and the asked,
  // used and limit numbers.
  Result<Admitted> admit(const std::string& id, const model::Job& job, const std::vector<model::Quota>& quotas, Time now);
  void release(const std::string& id);

 private:
  struct Contribution {
    std::string project;
    std::string user;
    bool active = false;
    int64_t blocks = 0;
    int model = -1;  // the one model the job names, or -1
    std::optional<Time> started;
    std::optional<Time> finished;
  };
  struct Usage {
    int64_t jobs = 0;
    int64_t blocks = 0;
    std::map<int, int64_t> blocks_by_model;
  };
  static Contribution contribution_of(const model::Job& job);
  void add(const Contribution& c, int sign);
  double gpu_hours(const std::string& project, const std::string& user, Duration window, Time now) const;

  std::mutex mutex_;
  std::map<std::string, Contribution> by_job_;
  std::map<std::string, std::set<std::string>> jobs_of_project_;
  std::map<std::pair<std::string, std::string>, Usage> usage_;  // (project, "") and (project, user)
};

// The checks that need no quota: the project exists, the command is there, the workspace it names
// was uploaded (with the size the job says), the request can fit this cluster at all (a model some
// node has, enough GPUs of it, CPU and memory a node has), and the deadline can be met. `cache` is
// read under its lock by the caller. `workspace` is the stored workspace with the digest
// spec.workspace names, looked up by the caller before taking the cache's lock (the cache does
// not hold workspaces), and null when there is none the submitter may use; it is not read when
// the job names no workspace.
Status check_admissible(const model::Job& job, const ObjectCache& cache, const sched::PolicyConfig& policy, Time now,
                        const model::Workspace* workspace = nullptr);

}  // namespace cnlab::server
