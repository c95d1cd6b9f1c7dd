#include "sim/replay_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <queue>
#include <unordered_map>

#include "sched/scheduler.h"
#include "sim/replay_metrics.h"

namespace cnlab::sim {

bool CheckpointRule::applies(const std::string& priority_class) const {
  switch (kind) {
    case Kind::kAll: return true;
    case Kind::kNone: return false;
    case Kind::kClasses: return std::find(classes.begin(), classes.end(), priority_class) != classes.end();
  }
  return false;
}

std::string CheckpointRule::to_string() const {
  switch (kind) {
    case Kind::kAll: return "all";
    case Kind::kNone: return "none";
    case Kind::kClasses: return join(classes, ",");
  }
  return "";
}

Result<CheckpointRule> parse_checkpoint_rule(std::string_view text, std::string_view field) {
  std::string lower = to_lower(trim(text));
  if (lower == "all") return CheckpointRule{CheckpointRule::Kind::kAll, {}};
  if (lower == "none") return CheckpointRule{CheckpointRule::Kind::kNone, {}};
  std::vector<std::string> known;
  for (const auto& tier : sched::PolicyConfig{}.tiers) known.push_back(tier.name);
  CheckpointRule rule{CheckpointRule::Kind::kClasses, {}};
  for (std::string_view part : split(lower, ',')) {
    std::string name(trim(part));
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return Error::invalid_argument(std::string(field), std::string(text),
                                     fmt::format("\"{}\" is not a priority class; expected all, none, or a comma "
                                                 "list of: {}",
                                                 name, join(known, ", ")));
    }
    if (std::find(rule.classes.begin(), rule.classes.end(), name) == rule.classes.end()) rule.classes.push_back(name);
  }
  return rule;
}

double ReplayRun::mean_allocation() const {
  double span = static_cast<double>((end - start).count()) * static_cast<double>(capacity_blocks);
  return span > 0 ? allocated_block_seconds / span : 0.0;
}

double ReplayRun::mean_utilization() const {
  double span = static_cast<double>((end - start).count()) * static_cast<double>(capacity_blocks);
  return span > 0 ? requested_block_seconds / span : 0.0;
}

namespace {

constexpr size_t kMaxWarnings = 20;
// Finished jobs are compacted out of the snapshot once they are this many and half of it.
constexpr size_t kCompactAfter = 256;
constexpr uint64_t kProgressEvery = 1024;

class Engine {
 public:
  Engine(const ReplayTrace& trace, const std::vector<model::Node>& nodes, ReplayPolicy& policy,
         const ReplayOptions& options)
      : trace_(trace),
        policy_(policy),
        options_(options),
        start_(trace.jobs.empty() ? Time{} : trace.jobs.front().submit),
        meter_(nodes.size(), start_, options.power_down_after) {
    snap_.nodes = nodes;
    snap_.usage = sched::UsageLedger(sched::PolicyConfig{}.fair_share_half_life);
    for (model::Node& node : snap_.nodes) {
      node.idle_since = start_;
      // Every node's agent takes live migrations and restores GPU state, as the moves the replay
      // prices assume (--migrations); a scheduler without moves never asks.
      node.peer_address = node.meta.name + ":7443";
      node.gpu_checkpoint = true;
    }
    out_.policy = std::string(policy.name());
    out_.start = start_;
    out_.nodes = nodes.size();
    for (const model::Node& node : nodes) out_.capacity_blocks += static_cast<int64_t>(node.gpus.size()) * model::kBlocksPerGpu;
    out_.jobs.resize(trace.jobs.size());
    runs_.resize(trace.jobs.size());
    snap_of_.assign(trace.jobs.size(), -1);
    std::map<std::pair<std::string, std::string>, uint32_t> users;
    user_of_.reserve(trace.jobs.size());
    for (const ReplayJob& job : trace.jobs) {
      auto [it, added] = users.try_emplace({job.spec.project, job.spec.user}, static_cast<uint32_t>(users_.size()));
      if (added) users_.push_back(it->first);
      user_of_.push_back(it->second);
    }
    user_blocks_.assign(users_.size(), 0);
    user_usage_.assign(users_.size(), 0.0);
    for (uint32_t n = 0; n < nodes.size(); ++n) node_index_.emplace(nodes[n].meta.name, n);
  }

  Result<ReplayRun> run() {
    auto wall_start = std::chrono::steady_clock::now();
    last_ = start_;
    next_sample_ = start_;
    size_t next_arrival = 0;
    // Sentinels rather than std::optional: GCC 12 warns (maybe-uninitialized) on optionals of
    // time points here.
    const Time kNone = Time::max();
    Time last_cycle = Time::min(), wake = kNone;
    bool dirty = false;
    auto cycle_allowed_at = [&] { return last_cycle == Time::min() ? last_ : std::max(last_, last_cycle + options_.cycle_interval); };
    while (true) {
      drop_stale_completions();
      Time t = kNone;
      if (next_arrival < trace_.jobs.size()) t = std::min(t, trace_.jobs[next_arrival].submit);
      if (!heap_.empty()) t = std::min(t, heap_.top().end);
      if (dirty) t = std::min(t, cycle_allowed_at());
      t = std::min(t, wake);
      if (t == kNone) break;

      advance(t);
      while (!heap_.empty() && heap_.top().end <= t) {
        Completion c = heap_.top();
        heap_.pop();
        if (!current(c)) continue;
        complete(c.job, t);
        dirty = true;
      }
      while (next_arrival < trace_.jobs.size() && trace_.jobs[next_arrival].submit <= t) {
        arrive(static_cast<uint32_t>(next_arrival++));
        dirty = true;
      }
      if (wake <= t) {
        wake = kNone;
        dirty = true;
        ++out_.wake_ups;
      }
      if (pending_ == 0 && (running_ == 0 || !policy_.decides_with_nothing_waiting())) {
        dirty = false;  // nothing waits (nor runs, to be drained): a cycle could decide nothing
        wake = kNone;
      }
      if (dirty && t >= cycle_allowed_at()) {
        const bool anything_waits = pending_ > 0;
        auto woken = cycle(t);
        if (!woken) return woken.error();
        wake = woken->value_or(kNone);
        // A cycle with an empty queue (one that may only drain nodes) holds no later cycle back: a
        // policy without drains would not have run it, and the two should meet arrivals alike.
        if (anything_waits) last_cycle = t;
        dirty = false;
      }
    }
    Time end = last_;
    meter_.finish(end);
    if (out_.samples.empty() || out_.samples.back().at != end) sample(end);
    out_.end = end;
    out_.power_down_node_seconds = meter_.off_seconds();
    out_.nodes_ever_off = meter_.nodes_ever_off();
    out_.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    if (options_.progress) options_.progress(events_);
    return std::move(out_);
  }

 private:
  struct Run {
    Time start{};
    Duration done{0};  // work saved by checkpoints (0 for jobs that are not checkpointable)
    Duration paused{0};  // migration pauses since it started: its end moves by as much
    uint32_t epoch = 0;  // grows at each stop, so stale completions can be told apart
    bool running = false;
    int granted = 0;  // blocks granted while running (whole GPUs under fifo)
    std::vector<uint32_t> nodes;
  };
  struct Completion {
    Time end;
    uint32_t job;
    uint32_t epoch;
    bool operator>(const Completion& o) const { return std::tie(end, job) > std::tie(o.end, o.job); }
  };

  bool current(const Completion& c) const { return runs_[c.job].running && runs_[c.job].epoch == c.epoch; }
  void drop_stale_completions() {
    while (!heap_.empty() && !current(heap_.top())) heap_.pop();
  }

  // Moves the clock to `t`: the grid samples in between and the integrals over [last_, t), during
  // which nothing changed.
  void advance(Time t) {
    if (t <= last_) return;
    while (next_sample_ < t) sample(next_sample_);  // sample() moves next_sample_ on
    auto dt = static_cast<double>((t - last_).count());
    out_.allocated_block_seconds += static_cast<double>(allocated_) * dt;
    out_.requested_block_seconds += static_cast<double>(requested_) * dt;
    for (size_t u = 0; u < users_.size(); ++u) user_usage_[u] += static_cast<double>(user_blocks_[u]) * dt;
    last_ = t;
  }

  void sample(Time t) {
    double capacity = out_.capacity_blocks > 0 ? static_cast<double>(out_.capacity_blocks) : 1.0;
    out_.samples.push_back({t, static_cast<double>(allocated_) / capacity, static_cast<double>(requested_) / capacity,
                            pending_, running_, meter_.nodes_on(t)});
    if (next_sample_ == t) next_sample_ += options_.sample_every;
  }

  void count_event() {
    if (++events_ % kProgressEvery == 0 && options_.progress) options_.progress(events_);
  }

  void arrive(uint32_t j) {
    const ReplayJob& source = trace_.jobs[j];
    model::Job job;
    job.meta.name = source.name;
    job.spec = source.spec;
    job.spec.estimated_duration = source.run_time;
    job.spec.checkpointable = options_.checkpointable.applies(source.spec.priority_class);
    job.status.submitted_at = source.submit;
    snap_of_[j] = static_cast<int32_t>(snap_.jobs.size());
    job_of_.push_back(j);
    snap_.jobs.push_back(std::move(job));
    ++pending_;
    count_event();
  }

  // Job run `r` takes the blocks and nodes of `grants` (counted once per node).
  void join_nodes(Run& r, const std::vector<sched::NodeGrant>& grants, Time t) {
    for (const sched::NodeGrant& grant : grants) {
      for (const sched::GpuGrant& g : grant.gpus) r.granted += g.blocks;
      if (std::find(r.nodes.begin(), r.nodes.end(), grant.node) == r.nodes.end()) {
        r.nodes.push_back(grant.node);
        meter_.job_started(grant.node, t);
      }
    }
    allocated_ += r.granted;
  }

  // Job run `r` leaves its nodes (a node it leaves empty is idle from `t`) and its blocks.
  void leave_nodes(Run& r, Time t) {
    for (uint32_t n : r.nodes) {
      meter_.job_left(n, t);
      if (meter_.idle(n)) snap_.nodes[n].idle_since = t;
    }
    r.nodes.clear();
    allocated_ -= r.granted;
    r.granted = 0;
  }

  // Releases what job j holds; shared by completion and pre-emption.
  void stop(uint32_t j, Time t) {
    Run& r = runs_[j];
    JobOutcome& o = out_.jobs[j];
    o.ran += t - r.start;
    const int asked = trace_.jobs[j].spec.gpu.total_blocks();
    requested_ -= asked;
    user_blocks_[user_of_[j]] -= asked;
    leave_nodes(r, t);
    r.running = false;
    ++r.epoch;
    --running_;
  }

  void complete(uint32_t j, Time t) {
    stop(j, t);
    out_.jobs[j].end = t;
    model::Job& job = snap_.jobs[static_cast<size_t>(snap_of_[j])];
    job.status.phase = model::JobPhase::kSucceeded;
    job.status.placement.clear();
    ++finished_in_snap_;
    count_event();
  }

  void preempt(uint32_t j, Time t) {
    Run& r = runs_[j];
    JobOutcome& o = out_.jobs[j];
    model::Job& job = snap_.jobs[static_cast<size_t>(snap_of_[j])];
    Duration elapsed = std::max(Duration{0}, t - r.start - r.paused);  // a pause does no work
    Duration saved{0};
    if (job.spec.checkpointable && options_.checkpoint_every.count() > 0) {
      saved = elapsed / options_.checkpoint_every * options_.checkpoint_every;
    }
    r.done += saved;
    o.lost += elapsed - saved;
    ++o.preemptions;
    ++out_.preemptions;
    stop(j, t);
    job.spec.estimated_duration = trace_.jobs[j].run_time - r.done;
    job.status.last_checkpoint_at.reset();
    ++pending_;
  }

  void start(uint32_t j, const sched::Placement& p, Time t) {
    Run& r = runs_[j];
    JobOutcome& o = out_.jobs[j];
    r.start = t;
    r.paused = Duration{0};
    r.running = true;
    if (!o.first_start) o.first_start = t;
    heap_.push({t + (trace_.jobs[j].run_time - r.done), j, r.epoch});
    join_nodes(r, p.nodes, t);
    const int asked = trace_.jobs[j].spec.gpu.total_blocks();
    requested_ += asked;
    user_blocks_[user_of_[j]] += asked;
    --pending_;
    ++running_;
  }

  // Job j moves live (sched::apply_decisions rebinds it): it keeps its progress and ends the
  // pause later.
  void migrate(uint32_t j, const sched::Migration& m, Time t) {
    Run& r = runs_[j];
    model::Job& job = snap_.jobs[static_cast<size_t>(snap_of_[j])];
    leave_nodes(r, t);
    join_nodes(r, m.to, t);
    const Duration pause = std::chrono::ceil<Duration>(m.pause);
    r.paused += pause;
    job.spec.estimated_duration = job.spec.estimated_duration.value_or(Duration{0}) + pause;
    ++r.epoch;  // the completion it had is stale
    heap_.push({r.start + (trace_.jobs[j].run_time - r.done) + r.paused, j, r.epoch});
    ++out_.jobs[j].migrations;
    ++out_.migrations;
    if (m.reason == sched::MoveReason::kDrain) ++out_.drain_moves;
    out_.migration_pause += m.pause;
  }

  Status check_decisions(const sched::CycleResult& result) const {
    auto bad = [&](std::string what) {
      return Error::internal(fmt::format("policy {} at t={}s: {}", policy_.name(), trace_seconds(snap_.now), what));
    };
    for (const sched::Preemption& p : result.preemptions) {
      if (p.victim >= snap_.jobs.size() || snap_.jobs[p.victim].status.phase != model::JobPhase::kRunning) {
        return bad(fmt::format("pre-empts job index {}, which is not running", p.victim));
      }
    }
    for (const sched::Migration& m : result.migrations) {
      if (m.job >= snap_.jobs.size() || snap_.jobs[m.job].status.phase != model::JobPhase::kRunning) {
        return bad(fmt::format("migrates job index {}, which is not running", m.job));
      }
      for (const sched::NodeGrant& grant : m.to) {
        if (grant.node >= snap_.nodes.size()) return bad(fmt::format("migrates to node index {}", grant.node));
      }
    }
    std::vector<uint8_t> placed(snap_.jobs.size(), 0);
    for (const sched::Placement& p : result.placements) {
      if (p.job >= snap_.jobs.size() || snap_.jobs[p.job].status.phase != model::JobPhase::kPending || placed[p.job]) {
        return bad(fmt::format("places job index {}, which is not waiting", p.job));
      }
      placed[p.job] = 1;
      for (const sched::NodeGrant& grant : p.nodes) {
        if (grant.node >= snap_.nodes.size()) return bad(fmt::format("places on node index {}", grant.node));
        for (const sched::GpuGrant& g : grant.gpus) {
          if (g.gpu < 0 || static_cast<size_t>(g.gpu) >= snap_.nodes[grant.node].gpus.size() || g.blocks <= 0 ||
              g.blocks > model::kBlocksPerGpu) {
            return bad(fmt::format("grants GPU {} ({} blocks) of node {}", g.gpu, g.blocks,
                                   snap_.nodes[grant.node].meta.name));
          }
        }
      }
    }
    return Status::ok();
  }

  // Independent of any policy: per GPU at most 100 blocks, per node at most its CPU and memory.
  Status verify() const {
    std::vector<std::vector<int>> blocks(snap_.nodes.size());
    std::vector<int64_t> cpu(snap_.nodes.size(), 0), mem(snap_.nodes.size(), 0);
    for (size_t n = 0; n < snap_.nodes.size(); ++n) blocks[n].assign(snap_.nodes[n].gpus.size(), 0);
    for (const model::Job& job : snap_.jobs) {
      if (job.status.phase != model::JobPhase::kRunning) continue;
      size_t total = 0;
      for (const auto& b : job.status.placement) total += b.gpus.size();
      for (const auto& b : job.status.placement) {
        uint32_t n = node_index_.at(b.node);
        size_t share = total == 0 ? 1 : b.gpus.size(), of = total == 0 ? job.status.placement.size() : total;
        cpu[n] += static_cast<int64_t>((static_cast<size_t>(job.spec.cpu_milli) * share + of - 1) / of);
        mem[n] += static_cast<int64_t>((static_cast<size_t>(job.spec.memory_mib) * share + of - 1) / of);
        for (const auto& g : b.gpus) blocks[n][static_cast<size_t>(g.index)] += g.blocks;
      }
    }
    for (size_t n = 0; n < snap_.nodes.size(); ++n) {
      const model::Node& node = snap_.nodes[n];
      bool over = cpu[n] > node.cpu_milli || mem[n] > node.memory_mib;
      for (int b : blocks[n]) over = over || b > model::kBlocksPerGpu;
      if (over) {
        return Error::internal(fmt::format("policy {} over-committed node {} at t={}s", policy_.name(), node.meta.name,
                                           trace_seconds(snap_.now)));
      }
    }
    if (allocated_ > out_.capacity_blocks) return Error::internal("more blocks granted than the cluster has");
    return Status::ok();
  }

  // Runs one cycle at `t` and applies it; returns the policy's wake-up time.
  Result<std::optional<Time>> cycle(Time t) {
    for (size_t u = 0; u < users_.size(); ++u) {
      if (user_usage_[u] > 0) snap_.usage.add(users_[u].first, users_[u].second, user_usage_[u], t);
      user_usage_[u] = 0;
    }
    // The scheduler weighs victims by the work they would lose since their last checkpoint.
    const Duration every = options_.checkpoint_every;
    for (model::Job& job : snap_.jobs) {
      if (job.status.phase != model::JobPhase::kRunning || !job.spec.checkpointable || every.count() <= 0) continue;
      Time started = *job.status.started_at;
      Duration saved = (t - started) / every * every;
      if (saved.count() > 0) job.status.last_checkpoint_at = started + saved;
    }
    snap_.now = t;
    sched::CycleResult result = policy_.cycle(snap_);
    ++out_.cycles;
    if (auto ok = check_decisions(result); !ok) return ok.error();
    for (const sched::Preemption& p : result.preemptions) preempt(job_of_[p.victim], t);
    for (const sched::Migration& m : result.migrations) migrate(job_of_[m.job], m, t);
    sched::apply_decisions(result, snap_);
    for (const sched::Placement& p : result.placements) start(job_of_[p.job], p, t);
    for (std::string& w : result.warnings) {
      if (out_.warnings.size() < kMaxWarnings &&
          std::find(out_.warnings.begin(), out_.warnings.end(), w) == out_.warnings.end()) {
        out_.warnings.push_back(std::move(w));
      }
    }
    if (options_.verify) {
      if (auto ok = verify(); !ok) return ok.error();
    }
    std::optional<Time> wake = policy_.wake_up(snap_, result);
    sample(t);
    compact();
    return wake;
  }

  void compact() {
    if (finished_in_snap_ < kCompactAfter || finished_in_snap_ * 2 < snap_.jobs.size()) return;
    size_t kept = 0;
    for (size_t i = 0; i < snap_.jobs.size(); ++i) {
      uint32_t j = job_of_[i];
      if (snap_.jobs[i].status.phase == model::JobPhase::kSucceeded) {
        snap_of_[j] = -1;
        continue;
      }
      if (kept != i) {
        snap_.jobs[kept] = std::move(snap_.jobs[i]);
        job_of_[kept] = j;
      }
      snap_of_[j] = static_cast<int32_t>(kept++);
    }
    snap_.jobs.resize(kept);
    job_of_.resize(kept);
    finished_in_snap_ = 0;
  }

  const ReplayTrace& trace_;
  ReplayPolicy& policy_;
  const ReplayOptions& options_;
  const Time start_;
  PowerDownMeter meter_;
  sched::Snapshot snap_;
  ReplayRun out_;
  std::vector<Run> runs_;
  std::vector<int32_t> snap_of_;   // trace index -> snapshot index, -1 before arrival and after compaction
  std::vector<uint32_t> job_of_;   // snapshot index -> trace index
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> heap_;
  std::unordered_map<std::string, uint32_t> node_index_;
  std::vector<std::pair<std::string, std::string>> users_;  // (project, user)
  std::vector<uint32_t> user_of_;  // trace index -> index in users_
  std::vector<int64_t> user_blocks_;  // blocks each user's running jobs asked for
  std::vector<double> user_usage_;    // block-seconds since the last cycle
  Time last_{}, next_sample_{};
  int64_t allocated_ = 0, requested_ = 0;
  uint32_t pending_ = 0, running_ = 0;
  size_t finished_in_snap_ = 0;
  uint64_t events_ = 0;
};

}  // namespace

Result<ReplayRun> run_replay(const ReplayTrace& trace, const std::vector<model::Node>& nodes, ReplayPolicy& policy,
                             const ReplayOptions& options) {
  return Engine(trace, nodes, policy, options).run();
}

}  // namespace cnlab::sim
