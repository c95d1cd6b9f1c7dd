// The policy chain: the whole order of decisions of one cycle, on one screen (Cycle::run).
#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "sched/calendar.h"
#include "sched/cluster_state.h"
#include "sched/drain.h"
#include "sched/explain.h"
#include "sched/fair_share.h"
#include "sched/job_info.h"
#include "sched/migration.h"
#include "sched/packing.h"
#include "sched/placement.h"
#include "sched/preemption.h"
#include "sched/workload_profile.h"

namespace cnlab::sched {

const std::string& CycleResult::reason_for(JobIndex job) const {
  static const std::string kNone;
  for (const Waiting& w : waiting) {
    if (w.job == job) return reasons[w.reason];
  }
  return kNone;
}

namespace {

// Waiting jobs for which moves are looked for, per cycle: each search scans the cluster.
constexpr uint32_t kMigrationSearchesPerCycle = 16;
// Candidate nodes verified for a drain, per cycle: each verification runs placement searches.
constexpr int kDrainVerificationsPerCycle = 16;

class Cycle {
 public:
  Cycle(const Snapshot& snapshot, const PolicyConfig& config)
      : snap_(snapshot),
        config_(config),
        now_(snapshot.now),
        state_(snapshot.nodes),
        calendar_(state_.node_count()),
        scorer_(&profile_),
        search_(state_, calendar_, scorer_, SearchLimits::of(config)),
        victims_(jobs_, snapshot.now),
        movers_(jobs_, config, snapshot.now),
        drains_(jobs_, config, movers_, snapshot.now) {}

  CycleResult run() {
    for (const std::string& w : state_.warnings()) warn(w);
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
    drain_for_power_down();
    report_power_down();
    return std::move(result_);
  }

 private:
  struct Failure {
    uint32_t reason = 0;
    Time from_end{};          // jobs of the shape that would end at or after this fail too
    uint32_t generation = 0;  // valid while it equals failure_generation_
    bool never = false;       // the shape can never fit this cluster, however empty
  };

  // --- Setup -------------------------------------------------------------------------------

  uint32_t intern_project(const std::string& name) {
    auto [it, added] = project_ids_.try_emplace(name, static_cast<uint32_t>(project_names_.size()));
    if (added) project_names_.push_back(name);
    return it->second;
  }

  // One hash per job: the failure memory and the workload profile then work on ids.
  uint32_t intern_shape(const JobShape& shape) {
    auto [it, added] = shape_ids_.try_emplace(shape, static_cast<uint32_t>(shapes_.size()));
    if (added) {
      shapes_.push_back(shape);
      shape_jobs_.push_back(0);
    }
    ++shape_jobs_[it->second];
    return it->second;
  }

  // What a pending job's resume needs of its nodes (sched/node_traits.h), while some node that is
  // not Lost has it. Where none is left, the job starts on any node (from the beginning, if its dump
  // cannot be restored there) rather than wait for nodes that may never come back.
  NodeTraits traits_to_resume_here(const model::Job& job) {
    const NodeTraits wanted = traits_to_resume(job);
    if (wanted == 0) return 0;
    if (!traits_present_) {
      traits_present_.emplace();
      for (const model::Node& node : snap_.nodes) {
        if (node.phase == model::NodePhase::kLost) continue;
        for (int t = 0; t < kTraitSets; ++t) (*traits_present_)[t] |= has_traits(traits_of(node), static_cast<NodeTraits>(t));
      }
    }
    return (*traits_present_)[wanted] ? wanted : 0;
  }

  // What the target of a move of `job` off its one node must have, so that a move's search meets
  // only targets the server carries a move out to; nullopt when the node it runs on could not dump
  // it for a move (it lacks what a target needs: a working CRIU, or for GPUs cuda-checkpoint).
  std::optional<NodeTraits> traits_to_move_from(const model::Job& job) const {
    const uint32_t source = state_.find_node(job.status.placement.front().node);
    if (source == kNone) return std::nullopt;
    const NodeTraits needs = traits_to_move(job, snap_.nodes[source]);
    if (!has_traits(state_.node(source).traits, needs)) return std::nullopt;
    return needs;
  }

  uint32_t intern_user(uint32_t project, std::string_view user) {
    auto [it, added] = user_ids_.try_emplace({project, user}, static_cast<uint32_t>(users_.size()));
    if (added) users_.emplace_back(project, user);
    return it->second;
  }

  void resolve_jobs() {
    jobs_.resize(snap_.jobs.size());
    job_allocations_.assign(snap_.jobs.size(), {0, 0});
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
      info.project = intern_project(job.spec.project);
      info.user = intern_user(info.project, job.spec.user);
      info.shape = JobShape::of(job.spec);
      info.submitted = job.status.submitted_at;
      info.deadline = job.spec.deadline;
      info.estimate = job.spec.estimated_duration.value_or(Duration{0});
      info.checkpointable = job.spec.checkpointable;
      info.min_runtime = job.spec.min_runtime.value_or(config_.tiers[info.tier].min_runtime);
      if (info.running) {
        info.started = job.status.started_at.value_or(now_);
        info.last_checkpoint = std::max(info.started, job.status.last_checkpoint_at.value_or(info.started));
        info.movable = config_.max_migrations_per_cycle > 0 && info.checkpointable && job.status.placement.size() == 1 &&
                       (config_.migrate_gpu_jobs || info.shape.kind == model::SliceKind::kNone) &&
                       !job.status.migration && !job.status.cancel_requested && !moved_recently(job);
        info.memory_to_copy_mib = model::memory_to_move_mib(job);
        if (info.movable) {
          const std::optional<NodeTraits> needs = traits_to_move_from(job);
          info.movable = needs.has_value();
          info.shape.node_traits = needs.value_or(0);
        }
        info.shape_id = intern_shape(info.shape);
        account_running(j);
        ++result_.stats.running;
      } else {
        info.shape.node_traits = traits_to_resume_here(job);
        info.shape_id = intern_shape(info.shape);
        ++result_.stats.pending;
        pending_by_tier_.resize(config_.tiers.size());
        pending_by_tier_[info.tier].push_back(j);
      }
    }
    for (uint32_t id = 0; id < shapes_.size(); ++id) profile_.add(shapes_[id], shape_jobs_[id]);
    failures_.resize(shapes_.size());
    held_blocks_.resize(project_names_.size());
    held_user_blocks_.resize(users_.size());
    for (const JobInfo& info : jobs_) {
      if (!info.running) continue;
      held_blocks_[info.project] += info.shape.total_blocks();
      held_user_blocks_[info.user] += info.shape.total_blocks();
    }
  }

  // Whether `job` moved, or was asked to, within the migration cooldown (events are oldest first).
  bool moved_recently(const model::Job& job) const {
    for (auto it = job.status.events.rbegin(); it != job.status.events.rend(); ++it) {
      if (now_ - it->time >= config_.migration_cooldown) return false;
      if (it->type == model::JobEventType::kMigrationRequested || it->type == model::JobEventType::kMigrated) return true;
    }
    return false;
  }

  // Records what a running job holds. Bad bindings are reported and skipped, never fatal.
  void account_running(JobIndex j) {
    const model::Job& job = snap_.jobs[j];
    const JobInfo& info = jobs_[j];
    Time end = info.estimate.count() > 0 ? end_after(info.started, info.estimate) : kNever;
    if (end != kNever && end <= now_) end = kNever;  // overran its estimate: its end is unknown
    size_t gpus_total = 0;
    for (const auto& binding : job.status.placement) gpus_total += binding.gpus.size();
    job_allocations_[j] = {state_.allocation_count(), 0};
    for (const auto& binding : job.status.placement) {
      uint32_t node = state_.find_node(binding.node);
      if (node == kNone) {
        warn(fmt::format("job \"{}\": bound to unknown node \"{}\"", job.meta.name, binding.node));
        continue;
      }
      std::vector<PartUse>& uses = scratch_uses_;
      uses.clear();
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
      state_.allocate(j, node, cpu, mem, uses, info.shape.kind == model::SliceKind::kMig, info.started, end, &over);
      ++job_allocations_[j].second;
      if (over) warn(fmt::format("job \"{}\": node \"{}\" is over-committed by its binding", job.meta.name, binding.node));
    }
    hold_migration_target(j, end);
  }

  // A job moving live to another node still runs where it was until the target has it: the room it
  // will take there (host CPU, the memory the move copies, and the GPUs chosen for it) is held
  // meanwhile, so that no job is placed into it and the target is not over-committed when the job
  // arrives.
  void hold_migration_target(JobIndex j, Time end) {
    const model::Job& job = snap_.jobs[j];
    if (!job.status.migration || job.status.placement.size() != 1) return;
    const std::string& to = job.status.migration->to;
    const uint32_t node = state_.find_node(to);
    if (to.empty() || to == job.status.placement.front().node || node == kNone) return;
    const JobInfo& info = jobs_[j];
    std::vector<PartUse>& uses = scratch_uses_;
    uses.clear();
    for (const auto& g : job.status.migration->gpus) {
      const uint32_t p = state_.find_partition(node, g.index, g.mig_start);
      if (p != kNone) uses.push_back({p, static_cast<int16_t>(g.blocks), g.vram_mib});
    }
    bool over = false;
    state_.allocate(j, node, info.shape.cpu_milli, info.memory_to_copy_mib, uses, info.shape.kind == model::SliceKind::kMig,
                    info.started, end, &over);
    ++job_allocations_[j].second;
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
    std::vector<double> user_usage(users_.size()), user_share(users_.size(), 1.0);
    for (uint32_t p = 0; p < project_names_.size(); ++p) {
      project_usage[p] = snap_.usage.project_usage(project_names_[p], now_) + held_blocks_[p] * held_weight;
    }
    for (const auto& project : snap_.projects) {
      auto it = project_ids_.find(project.meta.name);
      if (it != project_ids_.end()) project_share[it->second] = project.share;
    }
    std::vector<const model::Project*> project_of(project_names_.size(), nullptr);
    for (const auto& p : snap_.projects) {
      if (auto it = project_ids_.find(p.meta.name); it != project_ids_.end()) project_of[it->second] = &p;
    }
    for (uint32_t u = 0; u < users_.size(); ++u) {
      const auto& [project, user] = users_[u];
      user_usage[u] = snap_.usage.user_usage(project_names_[project], std::string(user), now_) +
                      held_user_blocks_[u] * held_weight;
      if (const model::Project* p = project_of[project]) {
        if (auto it = p->user_shares.find(std::string(user)); it != p->user_shares.end()) user_share[u] = it->second;
      }
    }
    FairShareQueue queue(std::move(project_usage), std::move(project_share), std::move(user_usage),
                         std::move(user_share), held_weight, project_names_);
    if (tier < static_cast<int>(pending_by_tier_.size())) {
      std::sort(taken_.begin(), taken_.end());
      for (JobIndex j : pending_by_tier_[tier]) {
        if (!std::binary_search(taken_.begin(), taken_.end(), j)) queue.push(jobs_[j], rank(jobs_[j]));
      }
    }
    return queue;
  }

  // Where a job stands among its user's waiting jobs of its tier, lowest first (FairShareQueue).
  // The response ratio (wait + estimate) / estimate lets short jobs pass long ones that arrived a
  // little earlier, while every job's ratio grows as it waits, so none starves.
  double rank(const JobInfo& job) const {
    if (config_.tiers[job.tier].order != QueueOrder::kResponseRatio) return 0;
    const double estimate = static_cast<double>((job.estimate.count() > 0 ? job.estimate : config_.default_estimate).count());
    const double waited = static_cast<double>(std::max(Duration{0}, now_ - job.submitted).count());
    return -(waited + estimate) / estimate;
  }

  // --- One job -----------------------------------------------------------------------------

  // Tries to place job `j`; returns true when it was placed (now or after pre-emption).
  bool process(JobIndex j) {
    const JobInfo& job = jobs_[j];
    Time end = job.estimate.count() > 0 ? end_after(now_, job.estimate) : kNever;
    if (!blocked_behind_.empty() && !config_.backfill) {
      needs_room_ = true;
      return wait(j, intern_reason(fmt::format("waits behind job {}, which is higher in the queue (backfill is off)",
                                               snap_.jobs[blocked_behind_.front()].meta.name)));
    }
    // A shape that found no place this cycle finds none later in it: capacity only shrinks during
    // a cycle (pre-emption clears this memory). Neither does a shape that asks at least as much of
    // every resource. When reservations were in the way, only jobs that would run at least as long
    // fail for sure.
    const Failure* failed = known_failure(job.shape_id, end);
    if (!failed) {
      ++result_.stats.placement_attempts;
      PlacementSearch::Stats stats;
      auto plan = search_.find(job.shape, now_, end, &stats);
      result_.stats.candidates_scored += stats.scored;
      if (plan) {
        place(j, *plan, end, {}, {});
        return true;
      }
      failed = remember_failure(job.shape_id, stats.hold_rejections > 0 ? end : Time::min());
    }
    uint32_t reason = failed->reason;
    // A job that could run here if there were room keeps every node on (no drains this cycle).
    if (!failed->never) needs_room_ = true;

    std::optional<Time> latest = job.latest_start();
    bool wants_reservation = job.deadline.has_value() || reservations_without_deadline_ < config_.reserve_top_jobs;
    bool may_reserve = wants_reservation && static_cast<int>(result_.reservations.size()) < config_.max_reservations;
    std::optional<EarliestStart> earliest;
    // A failure no reservation caused (from_end = min) means no node fits now whatever the holds.
    if (may_reserve) {
      earliest = calendar_.earliest_start(state_, job.shape, job.estimate, now_, failed->from_end != Time::min());
    }
    bool deadline_needs_preemption = latest && (!earliest || earliest->start > *latest);
    // Moving running jobs costs them a pause, evicting them their work since their checkpoint:
    // moves first, for a job that would otherwise wait long.
    if ((!earliest || earliest->start - now_ > config_.migrate_after_wait) && try_migrate(j, end)) return true;
    if ((config_.tiers[job.tier].may_preempt || deadline_needs_preemption) && try_preempt(j, end)) return true;

    if (earliest && earliest->start <= now_) {
      // The search's choice of GPUs met a reservation that other GPUs of the node avoid.
      place(j, plan_of(*earliest), end, {}, {});
      return true;
    }
    if (earliest) return reserve(j, *earliest, reason);
    if (latest && *latest < now_) {
      return wait(j, intern_reason(fmt::format("deadline {} cannot be met: it should have started by {}; {}",
                                               format_time_near(*job.deadline, now_),
                                               format_time_near(*latest, now_), result_.reasons[reason])));
    }
    if (wants_reservation && !may_reserve) {
      reason = intern_reason(fmt::format("not reserved: {} reservations made this cycle already; {}",
                                         config_.max_reservations, result_.reasons[reason]));
    }
    blocked_behind_.push_back(j);
    return wait(j, reason);
  }

  static Plan plan_of(const EarliestStart& start) {
    return Plan{{PlannedNode{start.node, start.cpu, start.mem, start.uses}}, 0};
  }

  bool try_preempt(JobIndex j, Time end) {
    const JobInfo& job = jobs_[j];
    if (preemptors_ >= config_.max_preemptors_per_cycle) return false;
    // A shape no victims could make room for at this tier cannot find any later in the cycle.
    auto key = std::pair(job.shape_id, job.tier);
    if (std::find(preemption_failures_.begin(), preemption_failures_.end(), key) != preemption_failures_.end()) {
      return false;
    }
    ++preemptors_;
    auto set = victims_.choose(state_, search_, job.shape, job.tier, end);
    if (!set) {
      preemption_failures_.push_back(key);
      return false;
    }
    preempt(j, *set, end);
    return true;
  }

  bool try_migrate(JobIndex j, Time end) {
    const JobInfo& job = jobs_[j];
    const int left = config_.max_migrations_per_cycle - static_cast<int>(result_.migrations.size());
    if (left <= 0 || result_.stats.migration_searches >= kMigrationSearchesPerCycle) return false;
    // A shape no moves could make room for finds none later in the cycle (until evictions or moves
    // change the cluster: they clear this memory).
    if (std::find(migration_failures_.begin(), migration_failures_.end(), job.shape_id) != migration_failures_.end()) {
      return false;
    }
    ++result_.stats.migration_searches;
    auto set = movers_.choose(state_, search_, job.shape, job.tier, end, std::min(left, config_.max_moves_per_job));
    if (!set) {
      migration_failures_.push_back(job.shape_id);
      return false;
    }
    std::vector<JobIndex> moved;
    for (const Move& move : set->moves) {
      state_.release(move.from);
      moved.push_back(move.job);
    }
    place(j, set->plan, end, {}, moved);
    for (const Move& move : set->moves) apply_move(move, j, MoveReason::kRoom);
    forget_failures();  // the moves left holes that other shapes may fit
    return true;
  }

  // Carries out a decided move in the cycle's state: the job holds its target from now on and moves
  // once per cycle at most, and a MIG instance made for it is decided with it.
  void apply_move(const Move& move, JobIndex for_job, MoveReason reason) {
    Applied applied = apply_plan(state_, calendar_, move.to, move.job, jobs_[move.job].shape.kind == model::SliceKind::kMig,
                                 now_, move.end);
    job_allocations_[move.job] = {applied.allocations.front(), 1};
    jobs_[move.job].movable = false;
    jobs_[move.job].moved = true;
    result_.migrations.push_back({move.job, std::move(applied.grants), for_job, move.pause, reason});
    for (auto& r : applied.repartitions) result_.repartitions.push_back(std::move(r));
  }

  bool reserve(JobIndex j, const EarliestStart& earliest, uint32_t reason) {
    const JobInfo& job = jobs_[j];
    calendar_.reserve(state_, j, earliest, end_after(earliest.start, job.estimate));
    if (!job.deadline) ++reservations_without_deadline_;
    std::optional<Time> latest = job.latest_start();
    bool meets = !latest || earliest.start <= *latest;
    Reservation reservation{j, earliest.node, earliest.start, {}, meets};
    for (const PartUse& use : earliest.uses) {
      const PartitionState& p = state_.partition(use.partition);
      reservation.gpus.push_back({state_.gpu(p.gpu).index, use.blocks, use.mem, p.mig_start});
    }
    result_.reservations.push_back(std::move(reservation));
    std::string when = fmt::format("reserved to start at {} on node {}", format_time_near(earliest.start, now_),
                                   snap_.nodes[earliest.node].meta.name);
    if (!meets) {
      when = fmt::format("deadline {} cannot be met: needs {} and the earliest start is {}; {}",
                         format_time_near(*job.deadline, now_), format_duration(job.estimate),
                         format_time_near(earliest.start, now_), when);
    }
    blocked_behind_.push_back(j);
    return wait(j, intern_reason(when + " (" + result_.reasons[reason] + ")"));
  }

  // The failure that covers shape `id` for a job ending at `end`: its own, or one of a shape it
  // dominates (then recorded as its own, with its own words).
  const Failure* known_failure(uint32_t id, Time end) {
    Failure& own = failures_[id];
    if (own.generation == failure_generation_) return end >= own.from_end ? &own : nullptr;
    const JobShape& shape = shapes_[id];
    auto family = failure_families_.find(family_of(shape));
    if (family == failure_families_.end()) return nullptr;
    for (uint32_t smaller_id : family->second) {
      const JobShape& smaller = shapes_[smaller_id];
      const Failure& f = failures_[smaller_id];
      if (end < f.from_end || shape.blocks < smaller.blocks || shape.vram_mib < smaller.vram_mib ||
          shape.cpu_milli < smaller.cpu_milli || shape.memory_mib < smaller.memory_mib) {
        continue;
      }
      const std::string& text = result_.reasons[f.reason];
      std::string context = text.substr(std::min(text.size(), needs_text(smaller).size()));
      own = Failure{intern_reason(needs_text(shape) + context), f.from_end, failure_generation_, f.never};
      return &own;
    }
    return nullptr;
  }

  const Failure* remember_failure(uint32_t id, Time from_end) {
    Failure& own = failures_[id];
    if (own.generation == failure_generation_) {
      own.from_end = std::min(own.from_end, from_end);
      return &own;
    }
    const JobShape& shape = shapes_[id];
    std::string never = never_fits(state_, snap_.nodes, shape, config_.gangs_span_nodes);
    own = Failure{intern_reason(never.empty() ? why_no_fit(state_, calendar_, snap_, shape, now_,
                                                           from_end == Time::min() ? kNever : from_end)
                                              : never),
                  from_end, failure_generation_, !never.empty()};
    failure_families_[family_of(shape)].push_back(id);
    return &own;
  }

  static std::string needs_text(const JobShape& shape) { return "needs " + describe_shape(shape); }
  static JobShape family_of(JobShape shape) {
    shape.blocks = shape.cpu_milli = shape.memory_mib = 0;
    shape.vram_mib = shape.vram_mib >= 0 ? 0 : -1;
    return shape;
  }

  void place(JobIndex j, const Plan& plan, Time end, std::vector<JobIndex> after_preempting,
             std::vector<JobIndex> after_migrating) {
    const JobInfo& job = jobs_[j];
    Applied applied = apply_plan(state_, calendar_, plan, j, job.shape.kind == model::SliceKind::kMig, now_, end);
    for (auto& r : applied.repartitions) result_.repartitions.push_back(std::move(r));
    // apply_plan allocates node after node, so a job's allocations have consecutive ids.
    job_allocations_[j] = {applied.allocations.front(), static_cast<uint32_t>(applied.allocations.size())};
    result_.placements.push_back({j, std::move(applied.grants), std::move(after_preempting), std::move(after_migrating)});
    held_blocks_[job.project] += job.shape.total_blocks();
    held_user_blocks_[job.user] += job.shape.total_blocks();
  }

  void preempt(JobIndex j, const VictimSet& set, Time end) {
    for (JobIndex v : set.victims) {
      const JobInfo& victim = jobs_[v];
      auto [first, count] = job_allocations_[v];
      for (uint32_t a = first; a < first + count; ++a) state_.release(a);
      jobs_[v].running = false;  // not a victim twice
      result_.preemptions.push_back({v, j, victim.checkpointable, true, victims_.work_lost(victim)});
    }
    forget_failures();  // evictions may free more than the pre-emptor takes
    place(j, set.plan, end, set.victims, {});
  }

  void forget_failures() {
    ++failure_generation_;
    failure_families_.clear();
    preemption_failures_.clear();
    migration_failures_.clear();
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

  // Drains for power-down come last, once every waiting job had its chance at the room, and only
  // when none is left waiting for room (a drained node is room a waiting job could have used).
  void drain_for_power_down() {
    if (config_.max_drain_moves_per_cycle <= 0 || needs_room_) return;
    DrainBudget budget{std::min(config_.max_drain_moves_per_cycle,
                                config_.max_migrations_per_cycle - static_cast<int>(result_.migrations.size())),
                       kDrainVerificationsPerCycle};
    std::vector<uint8_t> skip(state_.node_count(), 0), settling(state_.node_count(), 0);
    for (const model::Job& job : snap_.jobs) {
      if (!job.status.migration || !holds_node(job)) continue;
      for (const auto& binding : job.status.placement) mark(settling, binding.node);
      mark(settling, job.status.migration->to);
    }
    while (budget.moves > 0) {
      auto drain = drains_.choose(state_, calendar_, search_, budget, skip, settling);
      if (!drain) return;
      for (const Move& move : drain->moves) state_.release(move.from);
      for (const Move& move : drain->moves) apply_move(move, move.job, MoveReason::kDrain);
      budget.moves -= static_cast<int>(drain->moves.size());
      skip[drain->node] = 1;
    }
  }

  static bool holds_node(const model::Job& job) {
    return job.status.phase == model::JobPhase::kRunning || job.status.phase == model::JobPhase::kScheduled;
  }
  void mark(std::vector<uint8_t>& nodes, const std::string& name) const {
    const uint32_t n = state_.find_node(name);
    if (n != kNone) nodes[n] = 1;
  }

  void report_power_down() {
    for (uint32_t n = 0; n < state_.node_count(); ++n) {
      const model::Node& node = snap_.nodes[n];
      if (state_.node(n).allocations > 0 || !node.idle_since || !calendar_.holds_on(n).empty()) continue;
      if (now_ - *node.idle_since >= config_.power_down_after) result_.power_down.push_back({n, *node.idle_since});
    }
  }

  const Snapshot& snap_;
  const PolicyConfig& config_;
  Time now_;
  ClusterState state_;
  Calendar calendar_;
  WorkloadProfile profile_;  // the shapes of the running and pending jobs
  PackingScorer scorer_;
  PlacementSearch search_;
  std::vector<JobInfo> jobs_;
  VictimSelector victims_;
  MoveSelector movers_;
  DrainSelector drains_;
  CycleResult result_;

  std::vector<std::pair<uint32_t, uint32_t>> job_allocations_;  // (first allocation id, count) per job
  std::vector<PartUse> scratch_uses_;
  std::vector<std::vector<JobIndex>> pending_by_tier_;
  std::vector<JobIndex> taken_;  // pending jobs already handled as urgent deadline jobs
  struct UserKeyHash {
    size_t operator()(const std::pair<uint32_t, std::string_view>& k) const {
      return std::hash<std::string_view>()(k.second) * 31 + k.first;
    }
  };
  // Keys view the snapshot's strings, which outlive the cycle.
  std::unordered_map<std::string_view, uint32_t> project_ids_;
  std::vector<std::string> project_names_;
  std::unordered_map<std::pair<uint32_t, std::string_view>, uint32_t, UserKeyHash> user_ids_;
  std::vector<std::pair<uint32_t, std::string_view>> users_;  // (project id, user name)
  std::vector<double> held_blocks_, held_user_blocks_;
  std::unordered_map<JobShape, uint32_t, JobShapeHash> shape_ids_;
  std::optional<std::array<bool, kTraitSets>> traits_present_;  // by trait set, over nodes not Lost
  std::vector<JobShape> shapes_;         // by shape id
  std::vector<uint64_t> shape_jobs_;     // jobs per shape id
  std::vector<Failure> failures_;        // by shape id
  uint32_t failure_generation_ = 1;
  std::unordered_map<JobShape, std::vector<uint32_t>, JobShapeHash> failure_families_;  // shape ids
  std::vector<std::pair<uint32_t, int>> preemption_failures_;  // (shape id, tier)
  std::vector<uint32_t> migration_failures_;                   // shape ids
  std::unordered_map<std::string, uint32_t> reason_ids_;
  std::vector<JobIndex> blocked_behind_;
  int reservations_without_deadline_ = 0;
  int preemptors_ = 0;
  bool needs_room_ = false;  // a job was left waiting (or placed only by moves or evictions) for room
};

}  // namespace

CycleResult run_cycle(const Snapshot& snapshot, const PolicyConfig& config) { return Cycle(snapshot, config).run(); }

}  // namespace cnlab::sched
