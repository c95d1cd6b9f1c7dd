#include "server_loop_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <thread>

#include "server/job_release.h"
#include "server/job_writes.h"
#include "server/scheduler_loop.h"
#include "server_cluster.h"
#include "workload.h"

namespace cnlab::bench {
namespace {

using server::Allocation;
namespace kind = server::kind;

int fail(const Error& error) {
  std::fprintf(stderr, "server_bench --loop: %s\n", error.to_string().c_str());
  return 1;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Commits `ops` in transactions of at most `batch` operations; returns the last revision.
Result<int64_t> commit_in_batches(store::Store& store, std::vector<store::Op> ops, size_t batch) {
  int64_t revision = 0;
  for (size_t at = 0; at < ops.size(); at += batch) {
    std::vector<store::Op> part(
        std::make_move_iterator(ops.begin() + static_cast<ptrdiff_t>(at)),
        std::make_move_iterator(ops.begin() + static_cast<ptrdiff_t>(std::min(ops.size(), at + batch))));
    auto committed = store.txn(std::move(part));
    if (!committed) return committed.error();
    revision = committed->revision;
  }
  return revision;
}

std::string job_value(model::Job job) {
  job.meta.revision = 0;
  if (job.spec.command.empty()) job.spec.command = {"true"};
  return to_json(job).dump();
}

// The store's contents for the workload: nodes, jobs, and each node's allocation record.
std::vector<store::Op> seed_ops(const sched::Snapshot& s) {
  std::vector<store::Op> ops;
  ops.reserve(s.nodes.size() * 2 + s.jobs.size());
  for (const auto& node : s.nodes) ops.push_back(store::Op::create(kind::kNodes, node.meta.name, to_json(node).dump()));
  std::map<std::string, Allocation> allocations;
  for (const auto& job : s.jobs) {
    ops.push_back(store::Op::create(kind::kJobs, job.meta.name, job_value(job)));
    if (!server::holds_gpus(job.status.phase)) continue;
    for (const auto& b : job.status.placement) allocations[b.node].jobs[job.meta.name] = b.gpus;
  }
  for (const auto& [node, a] : allocations) {
    ops.push_back(store::Op::create(kind::kAllocations, node, server::allocation_to_json(node, a).dump()));
  }
  return ops;
}

// What one batch of changes wrote: its revision and the last job and allocation keys (a watch hands
// a revision's events over one by one, in the transaction's order).
struct Written {
  int64_t revision = 0;
  std::string last_job, last_allocation;
};

// Between cycles: `finish` jobs holding GPUs end (Succeeded, their allocation records updated), and
// as many new ones arrive (the finished jobs' specs, pending).
Result<Written> change_jobs(store::Store& store, server::ObjectCache& cache, size_t finish, int round, Time now,
                            std::mt19937_64& rng) {
  std::vector<std::pair<std::shared_ptr<const model::Job>, int64_t>> holding;
  // Collected with their shared pointers, so the cache may move on meanwhile.
  cache.read([&](const server::ObjectCache& c) {
    c.jobs.for_each([&](const std::string& key, const model::Job& job, int64_t revision) {
      if (server::holds_gpus(job.status.phase)) holding.emplace_back(c.jobs.get(key).object, revision);
    });
    return 0;
  });
  finish = std::min(finish, holding.size());
  for (size_t i = 0; i < finish; ++i) std::swap(holding[i], holding[i + rng() % (holding.size() - i)]);
  holding.resize(finish);

  std::map<std::string, std::pair<Allocation, int64_t>> allocations;
  std::vector<store::Op> ops;
  Written written;
  int n = 0;
  for (const auto& [job, revision] : holding) {
    model::Job done = *job;
    done.status.phase = model::JobPhase::kSucceeded;
    done.status.finished_at = now;
    done.status.exit_code = 0;
    done.status.events.push_back({model::JobEventType::kFinished, now, "Succeeded, exit code 0"});
    ops.push_back(store::Op::update(kind::kJobs, done.meta.name, job_value(done), revision));
    for (const auto& b : job->status.placement) {
      auto it = allocations.find(b.node);
      if (it == allocations.end()) {
        auto cached = cache.read([&](const server::ObjectCache& c) { return c.allocations.get(b.node); });
        it = allocations.emplace(b.node, std::pair{cached.object ? *cached.object : Allocation{}, cached.revision})
                 .first;
      }
      it->second.first.jobs.erase(job->meta.name);
    }
    model::Job fresh;
    fresh.meta.name = fmt::format("new-{}-{}", round, n++);
    fresh.spec = job->spec;
    fresh.status.phase = model::JobPhase::kPending;
    fresh.status.submitted_at = now;
    fresh.status.events.push_back({model::JobEventType::kQueued, now, "admitted"});
    ops.push_back(store::Op::create(kind::kJobs, fresh.meta.name, job_value(fresh)));
    written.last_job = fresh.meta.name;
  }
  for (auto& [node, entry] : allocations) {
    std::string value = server::allocation_to_json(node, entry.first).dump();
    ops.push_back(entry.second == 0 ? store::Op::create(kind::kAllocations, node, std::move(value))
                                    : store::Op::update(kind::kAllocations, node, std::move(value), entry.second));
    written.last_allocation = node;
  }
  // One transaction: the allocation records are compare-and-swapped on what the cache showed.
  auto committed = store.txn(std::move(ops));
  if (!committed) return committed.error();
  written.revision = committed->revision;
  return written;
}

template <typename F>
double median_us(F&& f) {
  std::vector<double> us;
  for (int i = 0; i < 51; ++i) {
    auto t = Clock::now();
    f();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
  }
  std::nth_element(us.begin(), us.begin() + 25, us.end());
  return us[25];
}

// What every node read (each agent's heartbeat reads its node) adds for `releasing_jobs`: the
// releases the node owes, from the cache's index of jobs awaiting one, beside the walk over every
// job that the index replaces.
void print_node_read_cost(const server::ObjectCache& cache) {
  size_t owing_nodes = 0, walked_waiting = 0;
  const double indexed = median_us([&] {
    cache.read([&](const server::ObjectCache& c) { return owing_nodes = server::releases_owed(c).size(); });
  });
  const double walked = median_us([&] {
    cache.read([&](const server::ObjectCache& c) {
      walked_waiting = 0;
      c.jobs.for_each([&](const std::string&, const model::Job& job, int64_t) { walked_waiting += server::awaits_release(job); });
      return 0;
    });
  });
  auto [jobs, indexed_waiting] = cache.read([](const server::ObjectCache& c) {
    return std::pair{c.jobs.size(), c.jobs_awaiting_release.size()};
  });
  std::printf(
      "a node read's releases owed (median of 51): %.1f us from the index (%zu jobs awaiting a release, %zu nodes "
      "owing one); a walk over the %zu cached jobs, which the index replaces, %.0f us (finds %zu)\n",
      indexed, indexed_waiting, owing_nodes, jobs, walked, walked_waiting);
}

// What the once-a-second migration watch reads under the cache's lock (the moves under way, and the
// running jobs whose periodic checkpoint may be due; idle reclaim and node drains read the same
// jobs): from the cache's indexes, beside the walk over every job that they replace.
void print_periodic_pass_cost(const server::ObjectCache& cache) {
  size_t indexed_found = 0, walked_found = 0;
  const double indexed = median_us([&] {
    cache.read([&](const server::ObjectCache& c) {
      indexed_found = c.jobs_migrating.size();
      c.for_each_job_in(c.jobs_holding_gpus, [&](const std::string&, const model::Job& job) {
        indexed_found += !job.status.migration && job.status.phase == model::JobPhase::kRunning;
      });
      return 0;
    });
  });
  const double walked = median_us([&] {
    cache.read([&](const server::ObjectCache& c) {
      walked_found = 0;
      c.jobs.for_each([&](const std::string&, const model::Job& job, int64_t) {
        walked_found += job.status.migration || job.status.phase == model::JobPhase::kRunning;
      });
      return 0;
    });
  });
  auto [jobs, holding] = cache.read([](const server::ObjectCache& c) {
    return std::pair{c.jobs.size(), c.jobs_holding_gpus.size()};
  });
  std::printf(
      "the migration watch's read (median of 51): %.1f us from the indexes (%zu jobs holding GPUs; %zu running or "
      "moving); a walk over the %zu cached jobs, which the indexes replace, %.0f us (finds %zu)\n",
      indexed, holding, indexed_found, jobs, walked, walked_found);
}

// What an agent's list of its node's jobs costs (each agent lists them whenever it connects, so every
// agent at once after a server restart): the full view of the jobs bound to the busiest node, from
// the cache's index by node, beside reading and decoding every stored job to keep that node's, as the
// list did before.
void print_node_list_cost(store::Store& store, const server::ObjectCache& cache) {
  auto [node, bound] = cache.read([](const server::ObjectCache& c) {
    std::pair<std::string, size_t> busiest;
    for (const auto& [name, jobs] : c.jobs_by_node) {
      if (jobs.size() > busiest.second) busiest = {name, jobs.size()};
    }
    return busiest;
  });
  size_t indexed_found = 0, stored_found = 0;
  const double indexed = median_us([&] {
    Json items = Json::array();
    cache.read([&](const server::ObjectCache& c) {
      auto on = c.jobs_by_node.find(node);
      if (on != c.jobs_by_node.end()) {
        c.for_each_job_in(on->second, [&](const std::string&, const model::Job& job) { items.push_back(to_json(job)); });
      }
      return 0;
    });
    indexed_found = items.size();
  });
  auto started = Clock::now();
  auto listed = store.list(server::kind::kJobs, {});
  if (listed) {
    for (const auto& record : listed->items) {
      Json job = Json::parse(record.value, nullptr, false);
      bool here = false;
      for (const auto& binding : job["status"].value("placement", Json::array())) here |= binding.value("node", "") == node;
      stored_found += here;
    }
  }
  const double stored = seconds_since(started) * 1e6;
  std::printf(
      "a node's job list (full view): %.1f us from the index by node (%zu jobs bound to %s; %zu found); reading and "
      "decoding every stored job, which the index replaces, %.0f us once (finds %zu)\n",
      indexed, bound, node.c_str(), indexed_found, stored, stored_found);
}

// The scheduler's view of the cache, built directly (what SchedulerLoop keeps incrementally).
sched::Snapshot direct_snapshot(const server::ObjectCache& cache, Time now) {
  sched::Snapshot s;
  s.now = now;
  cache.read([&](const server::ObjectCache& c) {
    c.nodes.for_each([&](const std::string&, const model::Node& node, int64_t) { s.nodes.push_back(node); });
    c.jobs.for_each([&](const std::string&, const model::Job& job, int64_t) {
      if (job.status.phase != model::JobPhase::kPending && !server::holds_gpus(job.status.phase)) return;
      s.jobs.push_back(job);
      if (job.status.phase == model::JobPhase::kScheduled) s.jobs.back().status.phase = model::JobPhase::kRunning;
    });
    c.projects.for_each([&](const std::string&, const model::Project& p, int64_t) { s.projects.push_back(p); });
    return 0;
  });
  return s;
}

std::vector<double> time_bare(const sched::Snapshot& s, int repeats, sched::CycleResult* last) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    auto started = Clock::now();
    sched::CycleResult r = sched::run_cycle(s, {});
    times.push_back(seconds_since(started));
    if (last) *last = std::move(r);
  }
  return times;
}

}  // namespace

int run_loop_bench(const LoopOptions& o) {
  auto started = Clock::now();
  sched::Snapshot workload = loaded_cluster({o.nodes, 35, 42});
  double build_seconds = seconds_since(started);
  sched::CycleResult bare_result;
  std::vector<double> bare_workload = time_bare(workload, o.bare_repeats, &bare_result);

  TempDir dir("cnlab_loop_bench");
  auto opened = store::open_sqlite_store({.path = dir.path() + "/store.db"});
  if (!opened) return fail(opened.error());
  store::Store& store = **opened;
  started = Clock::now();
  auto ops = seed_ops(workload);
  size_t records = ops.size();
  if (auto seeded = commit_in_batches(store, std::move(ops), 2000); !seeded) return fail(seeded.error());
  double seed_seconds = seconds_since(started);

  server::Metrics metrics;
  server::ServerConfig config;
  Time now = workload.now;
  server::ObjectCache cache(store);
  server::SchedulerLoop loop(store, cache, metrics, config, [&now] { return now; });
  loop.attach();
  started = Clock::now();
  if (auto ok = cache.start(); !ok) return fail(ok.error());
  double cache_start_seconds = seconds_since(started);

  struct Cycle {
    double total = 0, sync = 0, decide = 0, reasons = 0, commit = 0, upkeep = 0, bare = 0;
    size_t placed = 0, preempted = 0, conflicts = 0, pending = 0, running = 0, bare_placed = 0, bare_preempted = 0;
  };
  auto run = [&](double upkeep) {
    auto t = Clock::now();
    server::CycleReport r = loop.run_once();
    Cycle c;
    c.total = seconds_since(t);
    c.sync = r.sync_seconds;
    c.decide = r.cycle_seconds - r.sync_seconds;
    c.commit = r.commit_seconds;
    // The rest of run_once: rebuilding the map of waiting reasons (one entry per waiting job).
    c.reasons = std::max(0.0, c.total - r.cycle_seconds - r.commit_seconds);
    c.upkeep = upkeep;
    c.placed = r.placed;
    c.preempted = r.preempted;
    c.conflicts = r.conflicts;
    c.pending = r.pending;
    c.running = r.running;
    return c;
  };
  Cycle first = run(0);
  // The loop's fair-share ledger, mirrored: it charges every running job of its snapshot for the time
  // since the previous cycle (nothing on its first), which the directly built snapshots repeat.
  sched::UsageLedger usage(config.policy.fair_share_half_life);
  Time last_cycle = now;

  std::mt19937_64 rng(7);
  std::vector<Cycle> steady;
  auto steady_started = Clock::now();
  double own0 = own_cpu_seconds();
  MachineCpu machine0 = machine_cpu();
  sched::CycleResult same_result;
  size_t changed_per_cycle = static_cast<size_t>(o.change * static_cast<double>(workload.jobs.size()));
  for (int round = 0; round < o.cycles; ++round) {
    now += Duration{10};
    auto written = change_jobs(store, cache, changed_per_cycle / 2, round, now, rng);
    if (!written) return fail(written.error());
    // Snapshot upkeep outside the cycle: the store's watch hands the changes to the cache, which
    // decodes them and marks them dirty for the loop.
    auto t = Clock::now();
    auto landed = [&] {
      return cache.read([&](const server::ObjectCache& c) {
        return c.jobs.revision_of(written->last_job) >= written->revision &&
               (written->last_allocation.empty() ||
                c.allocations.revision_of(written->last_allocation) >= written->revision);
      });
    };
    while (!landed()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    double upkeep = seconds_since(t);
    // The bare cycle on exactly the state this cycle of the loop sees, built directly.
    sched::Snapshot same = direct_snapshot(cache, now);
    double seconds = static_cast<double>((now - last_cycle).count());
    for (const auto& job : same.jobs) {
      if (job.status.phase == model::JobPhase::kRunning) {
        usage.add(job.spec.project, job.spec.user, seconds * job.spec.gpu.total_blocks(), now);
      }
    }
    last_cycle = now;
    same.usage = usage;
    auto bare = time_bare(same, 1, &same_result);
    steady.push_back(run(upkeep));
    steady.back().bare = bare[0];
    steady.back().bare_placed = same_result.placements.size();
    steady.back().bare_preempted = same_result.preemptions.size();
    if (o.verbose) {
      const Cycle& c = steady.back();
      std::printf(
          "cycle %d: upkeep %.0f ms, sync %.1f ms, decide %.0f ms, reasons %.0f ms, commit %.0f ms, placed %zu, "
          "pre-empted %zu; bare %.0f ms, placed %zu\n",
          round, c.upkeep * 1e3, c.sync * 1e3, c.decide * 1e3, c.reasons * 1e3, c.commit * 1e3, c.placed, c.preempted,
          c.bare * 1e3, c.bare_placed);
    }
  }

  double steady_seconds = seconds_since(steady_started);
  MachineCpu machine1 = machine_cpu();
  double others = machine1.busy - machine0.busy - (own_cpu_seconds() - own0) - (machine1.irq - machine0.irq);
  auto med = [&](double Cycle::*field) {
    std::vector<double> v;
    for (const auto& c : steady) v.push_back(c.*field);
    return median(v);
  };
  auto range = [&](double Cycle::*field) {
    double lo = 1e9, hi = 0;
    for (const auto& c : steady) {
      lo = std::min(lo, c.*field);
      hi = std::max(hi, c.*field);
    }
    return fmt::format("{:.0f}..{:.0f}", lo * 1e3, hi * 1e3);
  };
  size_t placed = 0, preempted = 0, conflicts = 0, bare_placed = 0, bare_preempted = 0;
  for (const auto& c : steady) {
    placed += c.placed;
    preempted += c.preempted;
    conflicts += c.conflicts;
    bare_placed += c.bare_placed;
    bare_preempted += c.bare_preempted;
  }
  double bare_w = median(bare_workload), bare_s = med(&Cycle::bare);
  double loop_total = med(&Cycle::total), loop_cycle = med(&Cycle::sync) + med(&Cycle::decide);
  double loop_uncommitted = loop_cycle + med(&Cycle::reasons);

  std::printf("\n== 4. the scheduling loop at %d nodes ==\n", o.nodes);
  std::printf(
      "workload: bench/workload.h loaded_cluster(%d nodes x 8 GPUs, 35 jobs/node, seed 42): %zu jobs, built in %.1f "
      "s;\n"
      "SQLite store (WAL, synchronous=FULL) seeded with %zu records in %.1f s; ObjectCache start (list + decode) %.1f "
      "s\n",
      o.nodes, workload.jobs.size(), build_seconds, records, seed_seconds, cache_start_seconds);
  std::printf(
      "steady state: before each of %d cycles %zu jobs change in one transaction (%zu finish, as many arrive)\n",
      o.cycles, changed_per_cycle, changed_per_cycle / 2);
  std::printf(
      "| | run_once ms | sync (upkeep) | decide (run_cycle) | waiting reasons | commit | placed | pre-empted | pending "
      "| running |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::printf(
      "| loop, first cycle (full sync of %zu jobs) | %.0f | %.0f | %.0f | %.0f | %.0f | %zu | %zu | %zu | %zu |\n",
      workload.jobs.size(), first.total * 1e3, first.sync * 1e3, first.decide * 1e3, first.reasons * 1e3,
      first.commit * 1e3, first.placed, first.preempted, first.pending, first.running);
  std::printf(
      "| loop, steady state (median of %d; range) | %.0f (%s) | %.0f (%s) | %.0f (%s) | %.0f (%s) | %.0f (%s) | "
      "%.0f/cycle | %.0f/cycle | %zu | %zu |\n",
      o.cycles, loop_total * 1e3, range(&Cycle::total).c_str(), med(&Cycle::sync) * 1e3, range(&Cycle::sync).c_str(),
      med(&Cycle::decide) * 1e3, range(&Cycle::decide).c_str(), med(&Cycle::reasons) * 1e3,
      range(&Cycle::reasons).c_str(), med(&Cycle::commit) * 1e3, range(&Cycle::commit).c_str(),
      static_cast<double>(placed) / o.cycles, static_cast<double>(preempted) / o.cycles, steady.back().pending,
      steady.back().running);
  std::printf("| bare run_cycle, sched_bench's snapshot (median of %d) | %.0f | | %.0f | | | %zu | %zu | %u | %u |\n",
              o.bare_repeats, bare_w * 1e3, bare_w * 1e3, bare_result.placements.size(), bare_result.preemptions.size(),
              bare_result.stats.pending, bare_result.stats.running);
  std::printf(
      "| bare run_cycle on the state each steady cycle saw, built directly (median of %d; range) | %.0f (%s) | | %.0f "
      "| | | %.0f/cycle | %.0f/cycle | %u | %u |\n",
      o.cycles, bare_s * 1e3, range(&Cycle::bare).c_str(), bare_s * 1e3, static_cast<double>(bare_placed) / o.cycles,
      static_cast<double>(bare_preempted) / o.cycles, same_result.stats.pending, same_result.stats.running);
  size_t differing = 0;
  for (const auto& c : steady) differing += c.placed != c.bare_placed || c.preempted != c.bare_preempted ? 1 : 0;
  std::printf(
      "the loop and the bare cycle on the same state: same number of placements and pre-emptions in %zu of %d "
      "cycles (the loop's snapshot holds the jobs in another order, so ties can break otherwise); other processes "
      "used %.0f%% of one core during the steady state\n",
      steady.size() - differing, o.cycles, 100 * others / steady_seconds);
  std::printf(
      "ratio to the bare cycle on the same state (medians): sync + decide (what cnlab_scheduler_cycle_seconds "
      "measures) %.2fx; with the waiting reasons %.2fx; the whole run_once, commit included, %.2fx\n",
      loop_cycle / bare_s, loop_uncommitted / bare_s, loop_total / bare_s);
  std::printf(
      "cache upkeep per change batch (watch delivery, decode, dirty marks; outside run_once) median %.0f ms (%s); "
      "CAS conflicts %zu\n",
      med(&Cycle::upkeep) * 1e3, range(&Cycle::upkeep).c_str(), conflicts);
  print_node_read_cost(cache);
  print_periodic_pass_cost(cache);
  print_node_list_cost(store, cache);
  std::fflush(stdout);
  cache.stop();
  store.close();
  return 0;
}

}  // namespace cnlab::bench
