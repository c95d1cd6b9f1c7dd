#include "server/object_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/job_release.h"
#include "server/job_writes.h"

namespace cnlab::server {
namespace {

// Parses and decodes outside the lock (it is the costly part), then takes the lock only to swap
// the object in; Table::apply keeps the newer revision if another thread got there first.
// `applied(key, object or null)` runs under the lock for each object swapped in.
template <typename T, typename Decode, typename Applied>
bool apply_to(std::shared_mutex& mutex, Table<T>& table, const store::Record& record, bool removed, Decode decode,
              Applied applied) {
  if (removed) {
    std::unique_lock lock(mutex);
    if (!table.apply(record.key, nullptr, record.mod_revision)) return false;
    applied(record.key, nullptr);
    return true;
  }
  {
    std::shared_lock lock(mutex);
    if (table.revision_of(record.key) >= record.mod_revision) return false;
  }
  Json json = Json::parse(record.value, nullptr, false);
  auto object = decode(json);
  if (!object) {
    // Only the server writes the store and it validates first; a record that does not decode is a
    // bug or a hand-edited database. Keep serving; say which record.
    spdlog::error("store record does not decode kind=\"{}\" key=\"{}\" error=\"{}\"", record.kind, record.key,
                  object.error().to_string());
    return false;
  }
  if constexpr (requires { object->meta.revision; }) object->meta.revision = record.mod_revision;
  auto shared = std::make_shared<const T>(std::move(*object));
  std::unique_lock lock(mutex);
  if (!table.apply(record.key, shared, record.mod_revision)) return false;
  applied(record.key, shared);
  return true;
}

template <typename T, typename Decode>
bool apply_to(std::shared_mutex& mutex, Table<T>& table, const store::Record& record, bool removed, Decode decode) {
  return apply_to(mutex, table, record, removed, decode, [](const std::string&, const std::shared_ptr<const T>&) {});
}

const std::string* const kWatched[] = {&kind::kJobs,       &kind::kNodes,     &kind::kProjects,
                                       &kind::kUsers,      &kind::kRoleBindings, &kind::kQuotas,
                                       &kind::kApiTokens,  &kind::kJoinTokens, &kind::kAllocations};

}  // namespace

Json allocation_to_json(const std::string& node, const Allocation& allocation) {
  Json jobs = Json::object();
  for (const auto& [job, gpus] : allocation.jobs) {
    Json list = Json::array();
    for (const auto& g : gpus) {
      list.push_back({{"index", g.index}, {"blocks", g.blocks}, {"vram_mib", g.vram_mib}, {"mig_start", g.mig_start}});
    }
    jobs[job] = std::move(list);
  }
  return {{"kind", "Allocation"}, {"metadata", {{"name", node}}}, {"jobs", std::move(jobs)}};
}

Result<Allocation> allocation_from_json(const Json& json) {
  Allocation allocation;
  if (!json.is_object() || !json.contains("jobs") || !json["jobs"].is_object()) {
    return Error::invalid_argument("jobs", json.dump(), "an allocation record needs a jobs object");
  }
  for (const auto& [job, gpus] : json["jobs"].items()) {
    auto& list = allocation.jobs[job];
    for (const auto& g : gpus) {
      list.push_back({g.value("index", 0), g.value("blocks", 0), g.value("vram_mib", int64_t{0}),
                      g.value("mig_start", -1)});
    }
  }
  return allocation;
}

ObjectCache::ObjectCache(store::Store& store) : store_(store) {}
ObjectCache::~ObjectCache() { stop(); }

bool ObjectCache::apply_record(const store::Record& r, bool removed) {
  const std::string& k = r.kind;
  std::shared_mutex& m = mutex_;
  if (k == kind::kJobs) {
    return apply_to(m, jobs, r, removed, model::job_from_json,
                    [this](const std::string& key, const std::shared_ptr<const model::Job>& job) { index_job(key, job); });
  }
  if (k == kind::kNodes) return apply_to(m, nodes, r, removed, model::node_from_json);
  if (k == kind::kProjects) return apply_to(m, projects, r, removed, model::project_from_json);
  if (k == kind::kUsers) return apply_to(m, users, r, removed, model::user_from_json);
  if (k == kind::kRoleBindings) return apply_to(m, role_bindings, r, removed, model::role_binding_from_json);
  if (k == kind::kQuotas) return apply_to(m, quotas, r, removed, model::quota_from_json);
  if (k == kind::kApiTokens) return apply_to(m, api_tokens, r, removed, model::api_token_from_json);
  if (k == kind::kJoinTokens) return apply_to(m, join_tokens, r, removed, model::join_token_from_json);
  if (k == kind::kAllocations) return apply_to(m, allocations, r, removed, allocation_from_json);
  return false;
}

void ObjectCache::index_job(const std::string& key, const std::shared_ptr<const model::Job>& job) {
  auto keep = [&](JobsById& index, bool member) {
    if (member) {
      index.insert_or_assign(key, job);
    } else {
      index.erase(key);
    }
  };
  keep(jobs_awaiting_release, job && awaits_release(*job));
  keep(jobs_holding_gpus, job && holds_gpus(job->status.phase));
  keep(jobs_migrating, job && job->status.migration.has_value());

  std::vector<std::string>& was = nodes_of_job_[key];
  for (const auto& node : was) {
    auto on = jobs_by_node.find(node);
    if (on == jobs_by_node.end()) continue;
    on->second.erase(key);
    if (on->second.empty()) jobs_by_node.erase(on);
  }
  was.clear();
  if (job) {
    for (const auto& binding : job->status.placement) {
      if (std::find(was.begin(), was.end(), binding.node) != was.end()) continue;  // a gang's second binding there
      jobs_by_node[binding.node].insert_or_assign(key, job);
      was.push_back(binding.node);
    }
  }
  if (was.empty()) nodes_of_job_.erase(key);
}

void ObjectCache::notify(const std::string& kind, const std::string& key) {
  Change change{&kind, &key};
  for (auto& listener : listeners_) listener(change);
}

void ObjectCache::apply(const store::Record& record) {
  if (apply_record(record, false)) notify(record.kind, record.key);
}

void ObjectCache::apply_removed(const std::string& kind, const std::string& key, int64_t revision) {
  store::Record r{kind, key, "", 0, revision};
  if (apply_record(r, true)) notify(kind, key);
}

void ObjectCache::apply_job(const std::string& key, model::Job job, int64_t revision) {
  bool applied;
  {
    std::unique_lock lock(mutex_);
    job.meta.revision = revision;
    auto shared = std::make_shared<const model::Job>(std::move(job));
    applied = jobs.apply(key, shared, revision);
    if (applied) index_job(key, shared);
  }
  if (applied) notify(kind::kJobs, key);
}

void ObjectCache::subscribe(std::function<void(const Change&)> listener) { listeners_.push_back(std::move(listener)); }

int64_t ObjectCache::watched_revision() const { return watched_revision_.load(); }

void ObjectCache::on_events(const std::vector<store::Event>& events) {
  for (const auto& event : events) {
    if (apply_record(event.record, event.type == store::EventType::kDelete)) notify(event.record.kind, event.record.key);
    int64_t seen = watched_revision_.load();
    while (seen < event.record.mod_revision && !watched_revision_.compare_exchange_weak(seen, event.record.mod_revision)) {
    }
  }
}

Status ObjectCache::start() {
  // Each kind is listed and then watched from the revision its own list was read at, so nothing
  // committed in between is missed.
  size_t i = 0;
  for (const std::string* k : kWatched) {
    auto listed = store_.list(*k, store::ListOptions{});
    if (!listed) return listed.error();
    for (const auto& record : listed->items) {
      if (apply_record(record, false)) notify(record.kind, record.key);
    }
    int64_t seen = watched_revision_.load();
    if (listed->revision > seen) watched_revision_ = listed->revision;
    store::Store::WatchCallbacks callbacks;
    callbacks.on_events = [this](const std::vector<store::Event>& events) { on_events(events); };
    callbacks.on_close = [k](const Error& error) {
      spdlog::warn("cache watch closed kind=\"{}\" error=\"{}\"", *k, error.to_string());
    };
    auto watch = store_.watch(*k, "", listed->revision, std::move(callbacks));
    if (!watch) return watch.error();
    watches_[i++] = std::move(*watch);
  }
  return Status::ok();
}

void ObjectCache::stop() {
  for (auto& watch : watches_) watch.reset();
}

}  // namespace cnlab::server
