// The server's in-memory view of the store, fed by one watch (level-triggered: on start it lists
// every kind and watches from that revision). Handlers read it for access checks, quotas and
// listings of nodes; the scheduler loop is told of every change. Writes the server commits itself
// are applied at once (read-your-writes); the watch's later copy of the same revision is skipped.
// Deleted keys are kept as tombstones until the watch has passed their revision, so a late event
// can never bring an object back.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "model/model.h"
#include "store/store.h"

namespace cnlab::server {

// The store's kinds. Keys: jobs by job id, nodes/projects/users by name, role bindings, quotas and
// tokens by their object name, idempotency records by "<user>/<key digest>", allocations by node.
namespace kind {
inline const std::string kJobs = "jobs";
inline const std::string kNodes = "nodes";
inline const std::string kProjects = "projects";
inline const std::string kUsers = "users";
inline const std::string kRoleBindings = "rolebindings";
inline const std::string kQuotas = "quotas";
inline const std::string kApiTokens = "tokens";
inline const std::string kJoinTokens = "jointokens";
inline const std::string kWorkspaces = "workspaces";
inline const std::string kIdempotency = "idempotency";
inline const std::string kAllocations = "allocations";
}  // namespace kind

template <typename T>
struct Cached {
  std::shared_ptr<const T> object;  // null for a tombstone
  int64_t revision = 0;
};

template <typename T>
class Table {
 public:
  // Applies when newer than what is held; returns whether it did.
  bool apply(const std::string& key, std::shared_ptr<const T> object, int64_t revision) {
    auto& slot = rows_[key];
    if (slot.revision >= revision) return false;
    slot = {std::move(object), revision};
    return true;
  }
  Cached<T> get(const std::string& key) const {
    auto it = rows_.find(key);
    return it == rows_.end() ? Cached<T>{} : it->second;
  }
  int64_t revision_of(const std::string& key) const {
    auto it = rows_.find(key);
    return it == rows_.end() ? 0 : it->second.revision;
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [key, row] : rows_) {
      if (row.object) f(key, *row.object, row.revision);
    }
  }
  void prune_tombstones(int64_t upto) {
    std::erase_if(rows_, [&](const auto& kv) { return !kv.second.object && kv.second.revision <= upto; });
  }
  size_t size() const { return rows_.size(); }

 private:
  std::map<std::string, Cached<T>> rows_;
};

// A node's allocation record: which jobs hold which GPUs there. Bindings compare-and-swap it, so two
// controllers racing on one store can never both book the same slice.
struct Allocation {
  std::map<std::string, std::vector<model::GpuBinding>> jobs;
};
Json allocation_to_json(const std::string& node, const Allocation& allocation);
Result<Allocation> allocation_from_json(const Json& json);

struct Change {
  const std::string* kind;
  const std::string* key;
};

class ObjectCache {
 public:
  explicit ObjectCache(store::Store& store);
  ~ObjectCache();

  // Lists every kind and starts the watch. Fails only if the store does.
  Status start();
  void stop();

  // Applies a record this server committed (put) or removed.
  void apply(const store::Record& record);
  void apply_removed(const std::string& kind, const std::string& key, int64_t revision);
  // Typed fast path for records whose object the caller already has.
  void apply_job(const std::string& key, model::Job job, int64_t revision);

  // Called after each applied change, outside the cache's lock, on the applying thread.
  void subscribe(std::function<void(const Change&)> listener);

  // Reads take a shared lock; `read` runs `f` under it with the whole cache.
  template <typename F>
  auto read(F&& f) const {
    std::shared_lock lock(mutex_);
    return f(*this);
  }

  Table<model::Job> jobs;
  Table<model::Node> nodes;
  Table<model::Project> projects;
  Table<model::User> users;
  Table<model::RoleBinding> role_bindings;
  Table<model::Quota> quotas;
  Table<model::ApiToken> api_tokens;
  Table<model::JoinToken> join_tokens;
  Table<Allocation> allocations;
  // Indexes of jobs, kept as jobs are applied (each entry is the job's cached record, by id), so
  // that what runs often looks at the few jobs it concerns rather than at every job the server ever
  // kept (finished ones are most of them):
  using JobsById = std::map<std::string, std::shared_ptr<const model::Job>>;
  // - Pending while their nodes still stop them (job_release.h's awaits_release): node reads (every
  //   agent's heartbeat) and the node-lifecycle pass;
  JobsById jobs_awaiting_release;
  // - Scheduled or Running (job_writes.h's holds_gpus): the room left on nodes, periodic
  //   checkpoints, idle reclaim and node drains;
  JobsById jobs_holding_gpus;
  // - with a migration in flight, whatever their phase: the migration watch and node drains.
  JobsById jobs_migrating;
  // - by node, the jobs whose placement names it (model::bound_to), finished ones included: the
  //   lists and watches of a node's jobs (each agent's, whenever it connects).
  std::map<std::string, JobsById> jobs_by_node;
  // Runs f(id, job) for the jobs of one of these indexes, in id order; under a read.
  template <typename F>
  static void for_each_job_in(const JobsById& index, F&& f) {
    for (const auto& [id, job] : index) f(id, *job);
  }

  int64_t watched_revision() const;

 private:
  bool apply_record(const store::Record& record, bool removed);  // takes the lock itself
  void index_job(const std::string& key, const std::shared_ptr<const model::Job>& job);  // under the unique lock
  void notify(const std::string& kind, const std::string& key);
  void on_events(const std::vector<store::Event>& events);

  store::Store& store_;
  mutable std::shared_mutex mutex_;
  std::vector<std::function<void(const Change&)>> listeners_;
  std::unique_ptr<store::Store::WatchHandle> watches_[9];
  std::atomic<int64_t> watched_revision_{0};
  std::map<std::string, std::vector<std::string>> nodes_of_job_;  // where jobs_by_node holds each job
};

}  // namespace cnlab::server
