#include "server/job_writes.h"

#include <set>

#include "server/job_release.h"
#include "server/object_cache.h"

namespace cnlab::server {

bool holds_gpus(model::JobPhase phase) {
  return phase == model::JobPhase::kScheduled || phase == model::JobPhase::kRunning;
}

void requeue(model::Job& job, Time now, const std::string& why) {
  job.status.placement.clear();
  job.status.succeeded_nodes.clear();
  job.status.started_at.reset();
  if (job.status.cancel_requested) {
    job.status.phase = model::JobPhase::kCancelled;
    job.status.finished_at = now;
    job.status.events.push_back({model::JobEventType::kCancelled, now, why + " while cancelling"});
    return;
  }
  job.status.phase = model::JobPhase::kPending;
  const bool resume = job.spec.checkpointable && job.status.last_checkpoint_at.has_value();
  job.status.events.push_back(
      {model::JobEventType::kPreempted, now,
       why + "; requeued" +
           (resume ? " to resume from its checkpoint of " + format_rfc3339(*job.status.last_checkpoint_at)
                   : " to start again")});
}

void preempt(model::Job& job, Time now, const std::string& reason) {
  if (job.spec.checkpointable && job.status.phase == model::JobPhase::kRunning) await_release(job, now);
  job.status.phase = model::JobPhase::kPending;
  job.status.placement.clear();
  job.status.succeeded_nodes.clear();
  job.status.started_at.reset();
  job.status.events.push_back({model::JobEventType::kPreempted, now, reason});
}

namespace {

std::map<std::string, std::vector<model::GpuBinding>> held(const model::Job* job) {
  std::map<std::string, std::vector<model::GpuBinding>> out;
  if (!job || !holds_gpus(job->status.phase)) return out;
  for (const auto& binding : job->status.placement) out[binding.node] = binding.gpus;
  return out;
}

}  // namespace

Result<std::vector<store::Op>> job_write_ops(store::Store& store, const JobWrite& write) {
  const std::string& id = write.after->meta.name;
  std::vector<store::Op> ops;
  Json job = to_json(*write.after);
  job["metadata"].erase("revision");  // the store's mod_revision is the revision
  ops.push_back(store::Op::update(kind::kJobs, id, job.dump(), write.expected_revision));

  auto before = held(write.before);
  auto after = held(write.after);
  std::set<std::string> nodes;
  for (const auto& [node, gpus] : before) nodes.insert(node);
  for (const auto& [node, gpus] : after) nodes.insert(node);
  for (const std::string& node : nodes) {
    auto b = before.find(node);
    auto a = after.find(node);
    if (b != before.end() && a != after.end() && b->second == a->second) continue;
    Allocation allocation;
    int64_t revision = 0;
    auto record = store.get(kind::kAllocations, node);
    if (record) {
      auto parsed = allocation_from_json(Json::parse(record->value, nullptr, false));
      if (!parsed) return parsed.error();
      allocation = std::move(*parsed);
      revision = record->mod_revision;
    } else if (record.error().code != ErrorCode::kNotFound) {
      return record.error();
    }
    auto expected = write.allocation_revisions.find(node);
    if (expected != write.allocation_revisions.end() && expected->second != revision) {
      return Error::of(ErrorCode::kConflict, "allocations/" + node, std::to_string(expected->second),
                       "node " + node + " changed since the decision (now at revision " + std::to_string(revision) + ")");
    }
    if (a == after.end()) {
      allocation.jobs.erase(id);
    } else {
      allocation.jobs[id] = a->second;
    }
    std::string value = allocation_to_json(node, allocation).dump();
    ops.push_back(revision == 0 ? store::Op::create(kind::kAllocations, node, std::move(value))
                                : store::Op::update(kind::kAllocations, node, std::move(value), revision));
  }
  return ops;
}

Result<std::optional<model::Job>> update_job(store::Store& store, ObjectCache* cache, const std::string& id,
                                             const JobChange& change, const std::optional<std::string>& audit,
                                             int attempts) {
  Error last = Error::internal("no attempt made");
  for (int i = 0; i < attempts; ++i) {
    auto record = store.get(kind::kJobs, id);
    if (!record) return record.error();
    auto before = model::job_from_json(Json::parse(record->value, nullptr, false));
    if (!before) return before.error();
    model::Job after = *before;
    auto changed = change(after);
    if (!changed) return changed.error();
    if (!*changed) return std::optional<model::Job>();
    JobWrite write{&*before, &after, record->mod_revision, {}};
    auto ops = job_write_ops(store, write);
    if (!ops) return ops.error();
    auto result = store.txn(std::move(*ops), audit);
    if (result) {
      if (cache) {
        for (const auto& r : result->records) cache->apply(r);
      }
      after.meta.revision = result->revision;
      return std::optional<model::Job>(std::move(after));
    }
    last = result.error();
    // kAlreadyExists: an allocation record was created concurrently; retry like a lost CAS.
    if (last.code != ErrorCode::kConflict && last.code != ErrorCode::kAlreadyExists) return last;
  }
  return last;
}

}  // namespace cnlab::server
