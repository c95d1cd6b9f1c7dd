// Writing a job together with the allocation records of the nodes it holds GPUs on, in one
// transaction. Every change of what a job holds (bound, finished, pre-empted, requeued) goes
// through here, so the allocation records always equal the sum of the bindings, and a binder that
// decided on an outdated view of a node loses its compare-and-swap instead of double-booking.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "model/model.h"
#include "store/store.h"

namespace cnlab::server {

// Whether a job in this phase holds its placement's GPUs.
bool holds_gpus(model::JobPhase phase);

// Takes a job that holds GPUs off its nodes and back to the queue: Pending, with a Preempted event
// "<why>; requeued to resume from its checkpoint of ..." (or "to start again"), or Cancelled when a
// cancel was asked. Its run on those nodes was lost (a node lost, its memory lost in a move).
void requeue(model::Job& job, Time now, const std::string& why);

// Takes a job off its nodes while it runs on there (pre-empted, moved off a GPU, requeued by a
// drain): Pending, its placement cleared, with a Preempted event `reason`. A checkpointable job
// that was Running waits for those nodes to release it (job_release.h): they dump it as it stops.
void preempt(model::Job& job, Time now, const std::string& reason);

struct JobWrite {
  const model::Job* before = nullptr;  // as read, at `expected_revision`
  const model::Job* after = nullptr;   // what to store
  int64_t expected_revision = 0;
  // For bindings: the allocation record revisions the decision was made on (node -> revision, 0 for
  // "no record yet"). Nodes not listed are read fresh (safe for releases, which only free).
  std::map<std::string, int64_t> allocation_revisions;
};

// The ops for one job write: the job's CAS update and the allocation records it changes.
Result<std::vector<store::Op>> job_write_ops(store::Store& store, const JobWrite& write);

// Reads the job, lets `change` modify it (returning false leaves it alone), and writes it with its
// allocation changes, retrying from a fresh read when someone else changed it first (at most
// `attempts` times). Returns the stored job, or nullopt when `change` declined. What it wrote is
// applied to `cache` (when given) before it returns.
using JobChange = std::function<Result<bool>(model::Job&)>;
class ObjectCache;
Result<std::optional<model::Job>> update_job(store::Store& store, ObjectCache* cache, const std::string& id,
                                             const JobChange& change, const std::optional<std::string>& audit,
                                             int attempts = 8);

}  // namespace cnlab::server
