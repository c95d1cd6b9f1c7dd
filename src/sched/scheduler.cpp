// The policy chain: the whole order of decisions of one cycle, on one screen (Cycle::run).
#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "sched/calendar.h"
#include "sched/cluster_state.h"
#include "sched/explain.h"
#include "sched/fair_share.h"
#include "sched/job_info.h"
#include "sched/packing.h"
#include "sched/placement.h"
#include "sched/preemption.h"

namespace cnlab::sched {

const std::string& CycleResult::reason_for(JobIndex job) const {
  static const std::string kNone;
  for (const Waiting& w : waiting) {
    if (w.job == job) return reasons[w.reason];
  }
  return kNone;
}

namespace {

class Cycle {
 public:
  Cycle(const Snapshot& snapshot, const PolicyConfig& config)
      : snap_(snapshot),
        config_(config),
        now_(snapshot.now),
        state_(snapshot.nodes),
        calendar_(state_.node_count()),
        search_(state_, calendar_, scorer_, {config.placement_candidates, config.repartition_idle_gpus}),
        victims_(jobs_, snapshot.now) {}

  CycleResult run() {
    resolve_jobs();
    for (int tier = 0; tier < static_cast<int>(config_.tiers.size()); ++tier) {
      // 1. Deadline jobs about to miss their latest start, earliest first.
      for (JobIndex j : urgent_deadline_jobs(tier)) process(j);
      // 2. Everyone else in fair-share order.
      FairShareQueue queue = fair_share_queue(tier);
      while (!queue.empty()) {
        JobIndex j = queue.top();
        if (process(j)) queue.charge(jobs_[j], jobs_[j].shape.total_blocks());
        queue.pop();
      }
    }
    report_power_down();
    return std::move(result_);
  }

 private:
  // --- Setup -------------------------------------------------------------------------------

  uint32_t intern(std::unordered_map<std::string, uint32_t>& ids, std::vector<std::string>& names,
                  const std::string& name) {
    auto [it, added] = ids.try_emplace(name, static_cast<uint32_t>(names.size()));
    if (added) names.push_back(name);
    return it->second;
  }

  void resolve_jobs() {
    jobs_.resize(snap_.jobs.size());
    job_allocations_.resize(snap_.jobs.size());
    for (JobIndex j = 0; j < snap_.jobs.size(); ++j) {
      const model::Job& job = snap_.jobs[j];
      JobInfo& info = jobs_[j];
      info.index = j;
      info.running = job.status.phase == model::JobPhase::kRunning;
      bool pending = job.status.phase == model::JobPhase::kPending;
      if (!info.running && !pending) continue;
      info.tier = config_.tier_index(job.spec.priority_class);
      if (info.tier < 0) {
        info.tier = static_cast<int>(config_.tiers.size()) - 1;
        warn(fmt::format("job \"{}\": unknown priority class \"{}\"; treated as \"{}\"", job.meta.name,
                         job.spec.priority_class, config_.tiers.back().name));
      }
      info.project = intern(project_ids_, project_names_, job.spec.project);
      info.user = intern(user_ids_, user_keys_, job.spec.project + "/" + job.spec.user);
      info.shape = JobShape::of(job.spec);
      info.submitted = job.status.submitted_at;
      info.deadline = job.spec.deadline;
      info.estimate = job.spec.estimated_duration.value_or(Duration{0});
      info.checkpointable = job.spec.checkpointable;
      info.min_runtime = job.spec.min_runtime.value_or(config_.tiers[info.tier].min_runtime);
      if (info.running) {
        info.started = job.status.started_at.value_or(now_);
        info.last_checkpoint = std::max(info.started, job.status.last_checkpoint_at.value_or(info.started));
        account_running(j);
        ++result_.stats.running;
      } else {
        ++result_.stats.pending;
        pending_by_tier_.resize(config_.tiers.size());
        pending_by_tier_[info.tier].push_back(j);
      }
    }
    held_blocks_.resize(project_names_.size());
    held_user_blocks_.resize(user_keys_.size());
    for (const JobInfo& info : jobs_) {
      if (!info.running) continue;
      held_blocks_[info.project] += info.shape.total_blocks();
      held_user_blocks_[info.user] += info.shape.total_blocks();
    }
  }

  // Records what a running job holds. Bad bindings are reported and skipped, never fatal.
  void account_running(JobIndex j) {
    const model::Job& job = snap_.jobs[j];
    const JobInfo& info = jobs_[j];
    Time end = info.estimate.count() > 0 ? end_after(info.started, info.estimate) : kNever;
    if (end != kNever && end <= now_) end = kNever;  // overran its estimate: its end is unknown
    size_t gpus_total = 0;
    for (const auto& binding : job.status.placement) gpus_total += binding.gpus.size();
    for (const auto& binding : job.status.placement) {
      uint32_t node = state_.find_node(binding.node);
      if (node == kNone) {
        warn(fmt::format("job \"{}\": bound to unknown node \"{}\"", job.meta.name, binding.node));
        continue;
      }
      std::vector<PartUse> uses;
      for (const auto& g : binding.gpus) {
        uint32_t p = state_.find_partition(node, g.index, g.mig_start);
        if (p == kNone) {
          warn(fmt::format("job \"{}\": node \"{}\" has no GPU {}{}", job.meta.name, binding.node, g.index,
                           g.mig_start >= 0 ? fmt::format(" MIG instance at slot {}", g.mig_start) : ""));
          continue;
        }
        uses.push_back({p, static_cast<int16_t>(g.blocks), g.vram_mib});
      }
      // Host resources are split over nodes in proportion to their GPUs, as placement does.
      size_t share = gpus_total == 0 ? 1 : binding.gpus.size();
      size_t of = gpus_total == 0 ? job.status.placement.size() : gpus_total;
      int64_t cpu = static_cast<int64_t>((info.shape.cpu_milli * share + of - 1) / of);
      int64_t mem = static_cast<int64_t>((info.shape.memory_mib * share + of - 1) / of);
      bool over = false;
      job_allocations_[j].push_back(state_.allocate(j, node, cpu, mem, uses, info.shape.kind == model::SliceKind::kMig,
                                                    info.started, end, &over));
      if (over) warn(fmt::format("job \"{}\": node \"{}\" is over-committed by its binding", job.meta.name, binding.node));
    }
  }

  std::vector<JobIndex> urgent_deadline_jobs(int tier) {
    std::vector<JobIndex> urgent;
    if (tier >= static_cast<int>(pending_by_tier_.size())) return urgent;
    for (JobIndex j : pending_by_tier_[tier]) {
      auto latest = jobs_[j].latest_start();
      if (latest && *latest - now_ <= config_.deadline_urgency) urgent.push_back(j);
    }
    std::sort(urgent.begin(), urgent.end(), [&](JobIndex a, JobIndex b) {
      return std::tuple(*jobs_[a].latest_start(), jobs_[a].submitted, a) <
             std::tuple(*jobs_[b].latest_start(), jobs_[b].submitted, b);
    });
    for (JobIndex j : urgent) taken_.push_back(j);
    return urgent;
  }

  FairShareQueue fair_share_queue(int tier) {
    double held_weight = static_cast<double>(config_.fair_share_half_life.count()) / std::log(2.0);
    std::vector<double> project_usage(project_names_.size()), project_share(project_names_.size(), 1.0);
    std::vector<double> user_usage(user_keys_.size()), user_share(user_keys_.size(), 1.0);
    for (uint32_t p = 0; p < project_names_.size(); ++p) {
      project_usage[p] = snap_.usage.project_usage(project_names_[p], now_) + held_blocks_[p] * held_weight;
    }
    for (const auto& project : snap_.projects) {
      auto it = project_ids_.find(project.meta.name);
      if (it != project_ids_.end()) project_share[it->second] = project.share;
    }
    for (uint32_t u = 0; u < user_keys_.size(); ++u) {
      const std::string& key = user_keys_[u];
      size_t slash = key.find('/');
      std::string project = key.substr(0, slash), user = key.substr(slash + 1);
      user_usage[u] = snap_.usage.user_usage(project, user, now_) + held_user_blocks_[u] * held_weight;
      for (const auto& p : snap_.projects) {
        if (p.meta.name != project) continue;
        if (auto it = p.user_shares.find(user); it != p.user_shares.end()) user_share[u] = it->second;
      }
    }
    FairShareQueue queue(std::move(project_usage), std::move(project_share), std::move(user_usage),
                         std::move(user_share), held_weight, project_names_);
    if (tier < static_cast<int>(pending_by_tier_.size())) {
      std::sort(taken_.begin(), taken_.end());
      for (JobIndex j : pending_by_tier_[tier]) {
        if (!std::binary_search(taken_.begin(), taken_.end(), j)) queue.push(jobs_[j]);
      }
    }
    return queue;
  }

  // --- One job -----------------------------------------------------------------------------

  // Tries to place job `j`; returns true when it was placed (now or after pre-emption).
  bool process(JobIndex j) {
    const JobInfo& job = jobs_[j];
    Time end = job.estimate.count() > 0 ? end_after(now_, job.estimate) : kNever;
    if (!blocked_behind_.empty() && !config_.backfill) {
      return wait(j, intern_reason(fmt::format("waits behind job {}, which is higher in the queue (backfill is off)",
                                               snap_.jobs[blocked_behind_.front()].meta.name)));
    }
    // Jobs of a shape that already found no place this cycle cannot find one now: capacity only
    // shrinks during a cycle (pre-emption clears this memory).
    FailureKey key{job.shape, end};
    auto failed = failures_.find(key);
    if (failed == failures_.end()) {
      ++result_.stats.placement_attempts;
      if (auto plan = search_.find(job.shape, now_, end, &result_.stats.candidates_scored)) {
        place(j, *plan, end, {});
        return true;
      }
    }

    std::optional<Time> latest = job.latest_start();
    bool may_preempt = config_.tiers[job.tier].may_preempt;
    std::optional<EarliestStart> earliest;
    bool reserve_it = job.deadline.has_value() || reservations_made_ < config_.reserve_top_jobs;
    if (reserve_it) earliest = calendar_.earliest_start(state_, job.shape, job.estimate, now_);
    bool deadline_needs_preemption = latest && (!earliest || earliest->start > *latest);

    if ((may_preempt || deadline_needs_preemption) && preemptors_ < config_.max_preemptors_per_cycle) {
      ++preemptors_;
      if (auto set = victims_.choose(state_, search_, job.shape, job.tier, end)) {
        preempt(j, *set, end);
        return true;
      }
    }

    uint32_t reason;
    if (failed != failures_.end()) {
      reason = failed->second;
    } else {
      std::string never = never_fits(state_, snap_.nodes, job.shape);
      reason = intern_reason(never.empty() ? why_no_fit(state_, calendar_, snap_, job.shape, now_, end) : never);
      failures_.emplace(key, reason);
    }
    if (earliest) {
      calendar_.reserve(state_, j, *earliest, end_after(earliest->start, job.estimate));
      ++reservations_made_;
      bool meets = !latest || earliest->start <= *latest;
      Reservation reservation{j, earliest->node, earliest->start, {}, meets};
      for (const PartUse& use : earliest->uses) {
        const PartitionState& p = state_.partition(use.partition);
        reservation.gpus.push_back({state_.gpu(p.gpu).index, use.blocks, use.mem, p.mig_start});
      }
      result_.reservations.push_back(std::move(reservation));
      std::string when = fmt::format("reserved to start at {} on node {}", format_time_near(earliest->start, now_),
                                     snap_.nodes[earliest->node].meta.name);
      if (!meets) {
        when = fmt::format("deadline {} cannot be met: needs {} and the earliest start is {}; {}",
                           format_time_near(*job.deadline, now_), format_duration(job.estimate),
                           format_time_near(earliest->start, now_), when);
      }
      blocked_behind_.push_back(j);
      return wait(j, intern_reason(when + " (" + result_.reasons[reason] + ")"));
    }
    if (latest && *latest < now_) {
      return wait(j, intern_reason(fmt::format("deadline {} cannot be met: it should have started by {}; {}",
                                               format_time_near(*job.deadline, now_),
                                               format_time_near(*latest, now_), result_.reasons[reason])));
    }
    blocked_behind_.push_back(j);
    return wait(j, reason);
  }

  void place(JobIndex j, const Plan& plan, Time end, std::vector<JobIndex> after) {
    const JobInfo& job = jobs_[j];
    Applied applied = apply_plan(state_, calendar_, plan, j, job.shape.kind == model::SliceKind::kMig, now_, end);
    for (auto& r : applied.repartitions) result_.repartitions.push_back(std::move(r));
    job_allocations_[j] = applied.allocations;
    result_.placements.push_back({j, std::move(applied.grants), std::move(after)});
    held_blocks_[job.project] += job.shape.total_blocks();
    held_user_blocks_[job.user] += job.shape.total_blocks();
  }

  void preempt(JobIndex j, const VictimSet& set, Time end) {
    for (JobIndex v : set.victims) {
      const JobInfo& victim = jobs_[v];
      for (uint32_t a : job_allocations_[v]) state_.release(a);
      jobs_[v].running = false;  // not a victim twice
      result_.preemptions.push_back({v, j, victim.checkpointable, true, victims_.work_lost(victim)});
    }
    failures_.clear();  // evictions may free more than the pre-emptor takes
    place(j, set.plan, end, set.victims);
  }

  bool wait(JobIndex j, uint32_t reason) {
    result_.waiting.push_back({j, reason});
    return false;
  }

  uint32_t intern_reason(std::string text) {
    auto [it, added] = reason_ids_.try_emplace(text, static_cast<uint32_t>(result_.reasons.size()));
    if (added) result_.reasons.push_back(std::move(text));
    return it->second;
  }

  void warn(std::string text) { result_.warnings.push_back(std::move(text)); }

  void report_power_down() {
    for (uint32_t n = 0; n < state_.node_count(); ++n) {
      const model::Node& node = snap_.nodes[n];
      if (state_.node(n).allocations > 0 || !node.idle_since || !calendar_.holds_on(n).empty()) continue;
      if (now_ - *node.idle_since >= config_.power_down_after) result_.power_down.push_back({n, *node.idle_since});
    }
  }

  struct FailureKey {
    JobShape shape;
    Time end;
    bool operator==(const FailureKey&) const = default;
  };
  struct FailureKeyHash {
    size_t operator()(const FailureKey& k) const {
      const JobShape& s = k.shape;
      size_t h = static_cast<size_t>(s.kind) * 0x9E3779B97F4A7C15ull;
      for (int64_t v : {int64_t{s.models}, int64_t{s.blocks}, int64_t{s.gpu_count}, int64_t{s.mig_profile}, s.vram_mib,
                        s.cpu_milli, s.memory_mib, k.end.time_since_epoch().count()}) {
        h = (h ^ static_cast<size_t>(v)) * 0x100000001B3ull;
      }
      return h;
    }
  };

  const Snapshot& snap_;
  const PolicyConfig& config_;
  Time now_;
  ClusterState state_;
  Calendar calendar_;
  PackingScorer scorer_;
  PlacementSearch search_;
  std::vector<JobInfo> jobs_;
  VictimSelector victims_;
  CycleResult result_;

  std::vector<std::vector<uint32_t>> job_allocations_;
  std::vector<std::vector<JobIndex>> pending_by_tier_;
  std::vector<JobIndex> taken_;  // pending jobs already handled as urgent deadline jobs
  std::unordered_map<std::string, uint32_t> project_ids_, user_ids_;
  std::vector<std::string> project_names_, user_keys_;
  std::vector<double> held_blocks_, held_user_blocks_;
  std::unordered_map<FailureKey, uint32_t, FailureKeyHash> failures_;
  std::unordered_map<std::string, uint32_t> reason_ids_;
  std::vector<JobIndex> blocked_behind_;
  int reservations_made_ = 0;
  int preemptors_ = 0;
};

}  // namespace

CycleResult run_cycle(const Snapshot& snapshot, const PolicyConfig& config) { return Cycle(snapshot, config).run(); }

}  // namespace cnlab::sched
