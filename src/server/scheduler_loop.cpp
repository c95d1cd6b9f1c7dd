#include "server/scheduler_loop.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <algorithm>
#include <future>
#include <numeric>
#include <set>
#include <unordered_set>

#include "server/job_release.h"
#include "server/job_writes.h"
#include "server/migrations.h"

namespace cnlab::server {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Groups of nodes that some decision's job spans (a gang across nodes joins its nodes).
struct Groups {
  std::vector<size_t> parent;
  size_t find(size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void join(size_t a, size_t b) { parent[find(a)] = find(b); }
};

std::string grants_text(const model::NodeBinding& binding) {
  if (binding.gpus.empty()) return binding.node + " (no GPUs)";
  std::string out = binding.node + ":";
  for (const auto& g : binding.gpus) out += fmt::format(" gpu{}={}", g.index, g.blocks);
  return out;
}

}  // namespace

SchedulerLoop::SchedulerLoop(store::Store& store, ObjectCache& cache, Metrics& metrics, const ServerConfig& config,
                             std::function<Time()> clock)
    : store_(store), cache_(cache), metrics_(metrics), config_(config), clock_(std::move(clock)) {
  snapshot_.usage = sched::UsageLedger(config.policy.fair_share_half_life);
}

SchedulerLoop::~SchedulerLoop() { stop(); }

void SchedulerLoop::attach() {
  cache_.subscribe([this](const Change& change) { on_change(change); });
}

void SchedulerLoop::on_change(const Change& change) {
  bool relevant = true;
  {
    std::lock_guard lock(dirty_mutex_);
    if (*change.kind == kind::kJobs) {
      dirty_jobs_.insert(*change.key);
    } else if (*change.kind == kind::kNodes) {
      dirty_nodes_.insert(*change.key);
    } else if (*change.kind == kind::kProjects) {
      projects_dirty_ = true;
    } else {
      relevant = false;
    }
  }
  if (relevant) wake();
}

void SchedulerLoop::upsert_job(const std::string& id, const model::Job* job) {
  if (job && awaits_release(*job)) {
    awaiting_release_[id] = *job->status.awaiting_release;
  } else {
    awaiting_release_.erase(id);
  }
  bool keep = job && ((job->status.phase == model::JobPhase::kPending && !awaits_release(*job)) ||
                      holds_gpus(job->status.phase));
  auto it = job_slot_.find(id);
  if (!keep) {
    if (it == job_slot_.end()) return;
    // Swap-remove: the last job takes the freed slot.
    size_t slot = it->second;
    size_t last = snapshot_.jobs.size() - 1;
    if (slot != last) {
      snapshot_.jobs[slot] = std::move(snapshot_.jobs[last]);
      job_revision_[slot] = job_revision_[last];
      job_stored_phase_[slot] = job_stored_phase_[last];
      job_slot_[snapshot_.jobs[slot].meta.name] = slot;
    }
    snapshot_.jobs.pop_back();
    job_revision_.pop_back();
    job_stored_phase_.pop_back();
    job_slot_.erase(id);
    return;
  }
  model::Job copy = *job;
  model::JobPhase stored = copy.status.phase;
  if (stored == model::JobPhase::kScheduled) copy.status.phase = model::JobPhase::kRunning;  // it holds its slice
  if (it == job_slot_.end()) {
    job_slot_[id] = snapshot_.jobs.size();
    snapshot_.jobs.push_back(std::move(copy));
    job_revision_.push_back(job->meta.revision);
    job_stored_phase_.push_back(stored);
  } else {
    snapshot_.jobs[it->second] = std::move(copy);
    job_revision_[it->second] = job->meta.revision;
    job_stored_phase_[it->second] = stored;
  }
}

void SchedulerLoop::upsert_node(const std::string& name, const model::Node* node) {
  auto it = node_slot_.find(name);
  if (!node) {
    if (it == node_slot_.end()) return;
    size_t slot = it->second;
    size_t last = snapshot_.nodes.size() - 1;
    if (slot != last) {
      snapshot_.nodes[slot] = std::move(snapshot_.nodes[last]);
      node_slot_[snapshot_.nodes[slot].meta.name] = slot;
    }
    snapshot_.nodes.pop_back();
    node_slot_.erase(name);
    return;
  }
  if (it == node_slot_.end()) {
    node_slot_[name] = snapshot_.nodes.size();
    snapshot_.nodes.push_back(*node);
  } else {
    snapshot_.nodes[it->second] = *node;
  }
}

void SchedulerLoop::sync() {
  std::set<std::string> jobs, nodes;
  bool projects;
  {
    std::lock_guard lock(dirty_mutex_);
    jobs.swap(dirty_jobs_);
    nodes.swap(dirty_nodes_);
    projects = projects_dirty_;
    projects_dirty_ = false;
  }
  cache_.read([&](const ObjectCache& c) {
    for (const auto& id : jobs) upsert_job(id, c.jobs.get(id).object.get());
    for (const auto& name : nodes) upsert_node(name, c.nodes.get(name).object.get());
    if (projects) {
      snapshot_.projects.clear();
      c.projects.for_each([&](const std::string&, const model::Project& p, int64_t) { snapshot_.projects.push_back(p); });
    }
    return 0;
  });
}

CycleReport SchedulerLoop::run_once() {
  CycleReport report;
  std::lock_guard deciding(decisions_mutex_);
  auto started = std::chrono::steady_clock::now();
  sync();
  Time now = clock_();
  snapshot_.now = now;
  note_idle_nodes(now);
  // Fair share: charge running jobs for the time since the last cycle.
  if (last_usage_at_ != Time{} && now > last_usage_at_) {
    double seconds = static_cast<double>((now - last_usage_at_).count());
    for (const auto& job : snapshot_.jobs) {
      if (job.status.phase == model::JobPhase::kRunning) {
        snapshot_.usage.add(job.spec.project, job.spec.user, seconds * job.spec.gpu.total_blocks(), now);
      }
    }
  }
  last_usage_at_ = now;
  report.sync_seconds = seconds_since(started);

  sched::CycleResult result = sched::run_cycle(snapshot_, config_.policy);
  report.cycle_seconds = seconds_since(started);
  report.pending = result.stats.pending;
  report.running = result.stats.running;
  metrics_.cycle_seconds.observe({}, report.cycle_seconds);

  {
    // Built aside and swapped in: readers (the API serving a pending job) never wait for it.
    std::unordered_map<sched::JobIndex, Time> reserved;
    for (const auto& r : result.reservations) reserved.emplace(r.job, r.start);
    std::unordered_map<std::string, JobWaiting> reasons;
    reasons.reserve(result.waiting.size());
    int64_t position = 0;
    for (const auto& w : result.waiting) {
      JobWaiting waiting{result.reasons[w.reason], ++position, std::nullopt};
      if (auto it = reserved.find(w.job); it != reserved.end()) waiting.estimated_start = it->second;
      reasons.emplace(snapshot_.jobs[w.job].meta.name, std::move(waiting));
    }
    for (const auto& [id, pending] : awaiting_release_) reasons[id].reason = release_wait_reason(pending, now);
    std::unordered_map<std::string, NodeIdle> idle;
    for (const auto& [name, since] : idle_since_) idle[name].since = since;
    for (const auto& candidate : result.power_down) idle[snapshot_.nodes[candidate.node].meta.name].power_down_candidate = true;
    {
      std::lock_guard lock(reasons_mutex_);
      reasons_.swap(reasons);
      idle_.swap(idle);
    }
  }  // the old table is freed here, outside the lock
  auto commit_started = std::chrono::steady_clock::now();
  report.placed = result.placements.size();
  report.preempted = result.preemptions.size();
  report.migrated = result.migrations.size();
  report.conflicts = commit(result);
  report.commit_seconds = seconds_since(commit_started);
  for (const auto& warning : result.warnings) spdlog::warn("scheduler warning=\"{}\"", warning);
  return report;
}

size_t SchedulerLoop::commit(const sched::CycleResult& result) {
  if (result.placements.empty() && result.preemptions.empty() && result.repartitions.empty() &&
      result.migrations.empty()) {
    return 0;
  }
  Time now = snapshot_.now;
  // The new state of every job a decision changes.
  std::map<sched::JobIndex, model::Job> after;
  std::map<sched::JobIndex, Json> decisions;
  auto stored_before = [&](sched::JobIndex j) {
    model::Job job = snapshot_.jobs[j];
    job.status.phase = job_stored_phase_[j];
    return job;
  };
  for (const auto& p : result.preemptions) {
    model::Job job = stored_before(p.victim);
    const std::string& by = snapshot_.jobs[p.for_job].meta.name;
    preempt(job, now,
            fmt::format("pre-empted for job {}{}", by,
                        p.checkpoint ? "; resumes from its latest checkpoint" : "; restarts from the beginning"));
    after[p.victim] = std::move(job);
    decisions[p.victim] = {{"decision", "preempt"}, {"job", snapshot_.jobs[p.victim].meta.name}, {"for", by},
                           {"checkpoint", p.checkpoint}, {"work_lost", format_duration(p.work_lost)}};
  }
  // Moves for room are asked of the agents as `cnlab migrate` asks them (the source freezes and
  // dumps the job, the target restores it; see migrations.h). The scheduler plans moves only onto
  // targets that can take them (sched/node_traits.h); the targets are checked here again as a
  // guard, with what the scheduler does not see of the job (still only Scheduled, being
  // cancelled): a move that cannot be carried out is not asked for, and the job it was for is not
  // bound: it waits for the next cycle.
  std::set<sched::JobIndex> not_moved;
  // A drain (sched/drain.h) moves every job off a node for power-down, for no waiting job; it is
  // worth its pauses only whole, so when one of a node's drain moves cannot be carried out (a job
  // the scheduler sees running is still only Scheduled), none of them is asked for.
  std::map<std::string, std::string> drain_refused;  // node -> why
  auto move_refusal = [&](const sched::Migration& m, const model::Job& job) -> std::string {
    if (m.to.size() != 1) return "the scheduler chose several nodes";
    const model::Node* source = nullptr;
    if (job.status.placement.size() == 1) {
      auto slot = node_slot_.find(job.status.placement.front().node);
      if (slot != node_slot_.end()) source = &snapshot_.nodes[slot->second];
    }
    if (std::string why = migration_refusal(job, source); !why.empty()) return why;
    const model::Node& target = snapshot_.nodes[m.to.front().node];
    if (target.peer_address.empty()) {
      return "node " + target.meta.name + " takes no migrations (its agent reported no peer endpoint)";
    }
    if (!m.to.front().gpus.empty()) return gpu_state_target_refusal(source, target);
    return "";
  };
  for (const auto& m : result.migrations) {
    if (m.reason != sched::MoveReason::kDrain) continue;
    const model::Job job = stored_before(m.job);
    std::string why = move_refusal(m, job);
    if (!why.empty() && !job.status.placement.empty()) {
      drain_refused.emplace(job.status.placement.front().node, "job " + job.meta.name + " on it cannot move: " + why);
    }
  }
  for (const auto& m : result.migrations) {
    model::Job job = stored_before(m.job);
    const std::string& name = snapshot_.jobs[m.job].meta.name;
    const bool drain = m.reason == sched::MoveReason::kDrain;
    const std::string for_job = drain ? "power-down" : snapshot_.jobs[m.for_job].meta.name;
    std::string why = move_refusal(m, job);
    if (why.empty() && drain) {
      auto refused = drain_refused.find(job.status.placement.front().node);
      if (refused != drain_refused.end()) why = refused->second;
    }
    if (!why.empty()) {
      spdlog::info("scheduler move not carried out job=\"{}\" for=\"{}\" reason=\"{}\"", name, for_job, why);
      not_moved.insert(m.job);
      continue;
    }
    const std::string& from = job.status.placement.front().node;
    const std::string& to = snapshot_.nodes[m.to.front().node].meta.name;
    const std::string purpose = drain ? fmt::format("to empty node {} for power-down", from)
                                      : fmt::format("to make room for job {}", for_job);
    job.status.migration = model::Migration{to, now, "", std::nullopt, 0};
    for (const auto& g : m.to.front().gpus) job.status.migration->gpus.push_back({g.gpu, g.blocks, g.vram_mib, g.mig_start});
    job.status.events.push_back({model::JobEventType::kMigrationRequested, now,
                                 fmt::format("migration from {} to {} decided by the scheduler {} (expected pause {} ms)",
                                             from, to, purpose, m.pause.count())});
    after[m.job] = std::move(job);
    decisions[m.job] = {{"decision", "migrate"}, {"job", name}, {"from", from}, {"to", to}, {"for", for_job},
                        {"pause_ms", m.pause.count()}};
  }
  for (const auto& p : result.placements) {
    if (std::any_of(p.after_migrating.begin(), p.after_migrating.end(),
                    [&](sched::JobIndex j) { return not_moved.count(j) > 0; })) {
      continue;
    }
    model::Job job = stored_before(p.job);
    job.status.phase = model::JobPhase::kScheduled;
    job.status.started_at = now;
    job.status.placement.clear();
    job.status.succeeded_nodes.clear();  // a new attempt: no member of it has finished
    std::string where;
    for (const auto& grant : p.nodes) {
      model::NodeBinding binding{snapshot_.nodes[grant.node].meta.name, {}};
      for (const auto& g : grant.gpus) binding.gpus.push_back({g.gpu, g.blocks, g.vram_mib, g.mig_start});
      where += (where.empty() ? "" : "; ") + grants_text(binding);
      job.status.placement.push_back(std::move(binding));
    }
    job.status.waiting_reason.clear();
    job.status.events.push_back({model::JobEventType::kScheduled, now, "bound to " + where});
    metrics_.queue_wait.observe({}, static_cast<double>((now - job.status.submitted_at).count()));
    after[p.job] = std::move(job);
    decisions[p.job] = {{"decision", "place"}, {"job", snapshot_.jobs[p.job].meta.name}, {"where", where}};
  }

  // Nodes whose GPUs the scheduler repartitions: the record carries the decided layout (its agent
  // applies it, and reports it back), committed with the placements that need it.
  std::map<std::string, model::Node> repartitioned;
  for (const auto& r : result.repartitions) {
    model::Node& node = repartitioned.try_emplace(snapshot_.nodes[r.node].meta.name, snapshot_.nodes[r.node]).first->second;
    node.idle_since.reset();  // the loop's view, not the record's
    if (r.gpu >= 0 && static_cast<size_t>(r.gpu) < node.gpus.size()) {
      node.gpus[r.gpu].mig_enabled = r.mig_enabled;
      node.gpus[r.gpu].mig_instances = r.instances;
    }
  }

  // Group the changed jobs by the nodes they touch (before or after), joining nodes a job spans.
  std::vector<std::string> node_names;
  std::unordered_map<std::string, size_t> node_index;
  auto index_of = [&](const std::string& node) {
    auto [it, inserted] = node_index.emplace(node, node_names.size());
    if (inserted) node_names.push_back(node);
    return it->second;
  };
  std::map<sched::JobIndex, std::vector<size_t>> job_nodes;
  for (const auto& [j, job] : after) {
    for (const auto& b : snapshot_.jobs[j].status.placement) job_nodes[j].push_back(index_of(b.node));
    for (const auto& b : job.status.placement) job_nodes[j].push_back(index_of(b.node));
    // A move's target too: a MIG instance made there for it is written with the move, never apart.
    if (job.status.migration) job_nodes[j].push_back(index_of(job.status.migration->to));
  }
  Groups groups{std::vector<size_t>(node_names.size())};
  std::iota(groups.parent.begin(), groups.parent.end(), 0);
  for (const auto& [j, nodes] : job_nodes) {
    for (size_t k = 1; k < nodes.size(); ++k) groups.join(nodes[0], nodes[k]);
  }
  std::map<size_t, std::vector<sched::JobIndex>> jobs_of_group;
  for (const auto& [j, nodes] : job_nodes) {
    if (!nodes.empty()) jobs_of_group[groups.find(nodes[0])].push_back(j);
  }

  // One transaction per group: the jobs' compare-and-swap updates and each node's allocation record
  // (from the cache, compare-and-swap on the revision the decisions were made on).
  std::vector<std::future<Result<store::TxnResult>>> pending;
  for (const auto& [root, jobs] : jobs_of_group) {
    std::vector<store::Op> ops;
    std::map<std::string, std::pair<Allocation, int64_t>> allocations;
    Json audit_decisions = Json::array();
    cache_.read([&](const ObjectCache& c) {
      for (sched::JobIndex j : jobs) {
        for (size_t n : job_nodes[j]) {
          const std::string& node = node_names[n];
          if (allocations.count(node)) continue;
          auto cached = c.allocations.get(node);
          allocations[node] = {cached.object ? *cached.object : Allocation{}, cached.object ? cached.revision : 0};
        }
      }
      return 0;
    });
    for (sched::JobIndex j : jobs) {
      const model::Job& job = after[j];
      const std::string& id = job.meta.name;
      for (auto& [node, entry] : allocations) entry.first.jobs.erase(id);
      if (holds_gpus(job.status.phase)) {
        for (const auto& b : job.status.placement) allocations[b.node].first.jobs[id] = b.gpus;
      }
      Json value = to_json(job);
      value["metadata"].erase("revision");
      ops.push_back(store::Op::update(kind::kJobs, id, value.dump(), job_revision_[j]));
      audit_decisions.push_back(decisions[j]);
    }
    for (auto& [node, entry] : allocations) {
      if (auto it = repartitioned.find(node); it != repartitioned.end()) {
        Json value = to_json(it->second);
        value["metadata"].erase("revision");
        ops.push_back(store::Op::update(kind::kNodes, node, value.dump(), it->second.meta.revision));
        audit_decisions.push_back({{"decision", "repartition"}, {"node", node}});
        repartitioned.erase(it);
      }
      std::string value = allocation_to_json(node, entry.first).dump();
      ops.push_back(entry.second == 0 ? store::Op::create(kind::kAllocations, node, std::move(value))
                                      : store::Op::update(kind::kAllocations, node, std::move(value), entry.second));
    }
    Json audit = {{"time", format_rfc3339(now)}, {"actor", "scheduler"}, {"action", "scheduler.decisions"},
                  {"target", node_names[root]}, {"outcome", "ok"}, {"detail", {{"decisions", audit_decisions}}}};
    auto promise = std::make_shared<std::promise<Result<store::TxnResult>>>();
    pending.push_back(promise->get_future());
    store_.txn_async(std::move(ops), audit.dump(), [promise](Result<store::TxnResult> r) { promise->set_value(std::move(r)); });
  }
  for (auto& [name, node] : repartitioned) {
    // A repartition no placement of this cycle needed (rare): on its own.
    Json value = to_json(node);
    value["metadata"].erase("revision");
    Json audit = {{"time", format_rfc3339(now)}, {"actor", "scheduler"}, {"action", "scheduler.decisions"},
                  {"target", name}, {"outcome", "ok"},
                  {"detail", {{"decisions", Json::array({{{"decision", "repartition"}, {"node", name}}})}}}};
    auto promise = std::make_shared<std::promise<Result<store::TxnResult>>>();
    pending.push_back(promise->get_future());
    store_.txn_async({store::Op::update(kind::kNodes, name, value.dump(), node.meta.revision)}, audit.dump(),
                     [promise](Result<store::TxnResult> r) { promise->set_value(std::move(r)); });
  }
  size_t conflicts = 0;
  for (auto& f : pending) {
    Result<store::TxnResult> r = f.get();
    if (!r) {
      if (r.error().code == ErrorCode::kConflict || r.error().code == ErrorCode::kAlreadyExists) {
        ++conflicts;
      } else {
        spdlog::error("scheduler commit failed error=\"{}\"", r.error().to_string());
      }
      continue;
    }
    for (const auto& record : r->records) cache_.apply(record);
  }
  if (conflicts > 0) {
    spdlog::info("scheduler decisions lost a compare-and-swap groups={}; retrying with fresh state", conflicts);
    wake();
  }
  return conflicts;
}

void SchedulerLoop::wake() {
  {
    std::lock_guard lock(wake_mutex_);
    woken_ = true;
  }
  wake_cv_.notify_one();
}

void SchedulerLoop::start() { thread_ = std::thread([this] { loop(); }); }

void SchedulerLoop::stop() {
  {
    std::lock_guard lock(wake_mutex_);
    stopping_ = true;
  }
  wake_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void SchedulerLoop::loop() {
  while (true) {
    {
      std::unique_lock lock(wake_mutex_);
      wake_cv_.wait_for(lock, config_.schedule_period, [this] { return woken_ || stopping_; });
      if (stopping_) return;
      if (woken_) {
        // Debounce: let a burst of changes land, then schedule them in one cycle. Under sustained
        // change wait at least as long as the last cycle took, so the loop takes at most about
        // half a core however long the queue grows.
        auto wait = std::max<std::chrono::steady_clock::duration>(config_.schedule_debounce, last_cycle_);
        wake_cv_.wait_for(lock, wait, [this] { return stopping_; });
        if (stopping_) return;
      }
      woken_ = false;
    }
    try {
      auto started = std::chrono::steady_clock::now();
      run_once();
      last_cycle_ = std::chrono::steady_clock::now() - started;
    } catch (const std::exception& e) {
      spdlog::error("scheduling cycle failed error=\"{}\"", e.what());
    }
  }
}

std::string SchedulerLoop::waiting_reason(const std::string& job) const { return waiting(job).reason; }

void SchedulerLoop::note_idle_nodes(Time now) {
  std::unordered_set<std::string> busy;
  for (const auto& job : snapshot_.jobs) {
    for (const auto& binding : job.status.placement) busy.insert(binding.node);
  }
  // Nor is a node still stopping (dumping, uploading) a job taken off it.
  for (const auto& [id, pending] : awaiting_release_) busy.insert(pending.nodes.begin(), pending.nodes.end());
  std::unordered_map<std::string, Time> idle_since;
  for (auto& node : snapshot_.nodes) {
    node.idle_since.reset();
    if (busy.count(node.meta.name)) continue;
    auto known = idle_since_.find(node.meta.name);
    node.idle_since = known == idle_since_.end() ? now : known->second;
    idle_since.emplace(node.meta.name, *node.idle_since);
  }
  idle_since_.swap(idle_since);
}

NodeIdle SchedulerLoop::idle(const std::string& node) const {
  std::lock_guard lock(reasons_mutex_);
  auto it = idle_.find(node);
  return it == idle_.end() ? NodeIdle{} : it->second;
}

size_t SchedulerLoop::power_down_candidates() const {
  std::lock_guard lock(reasons_mutex_);
  return static_cast<size_t>(std::count_if(idle_.begin(), idle_.end(), [](const auto& entry) {
    return entry.second.power_down_candidate;
  }));
}

JobWaiting SchedulerLoop::waiting(const std::string& job) const {
  std::lock_guard lock(reasons_mutex_);
  auto it = reasons_.find(job);
  return it == reasons_.end() ? JobWaiting{} : it->second;
}

}  // namespace cnlab::server
