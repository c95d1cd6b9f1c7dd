#include "sim/replay_command.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <thread>

#include "model/model.h"
#include "sim/alloc_report.h"
#include "sim/cli_flags.h"
#include "sim/openb_trace.h"
#include "sim/policies/cnlab_replay_policy.h"
#include "sim/progress_bar.h"
#include "sim/replay_cluster.h"
#include "sim/replay_engine.h"
#include "sim/replay_policy.h"
#include "sim/replay_report.h"
#include "sim/replay_trace.h"

namespace cnlab::sim {
namespace {

constexpr int kBadInput = 2;
constexpr int kInternalFailure = 1;
constexpr double kMaxCoresPerGpu = 1024;
constexpr int64_t kMaxMemoryPerGpuMib = int64_t{64} * 1024 * 1024;  // 64 TiB
constexpr auto kProgressPoll = std::chrono::milliseconds(100);

// Every flag is collected as text, repeats included, and checked by run_replay_command, so each
// mistake gets CNLab's message and exit code 2 rather than CLI11's own (as `sim alloc` does).
struct ReplayFlags {
  std::vector<std::string> trace, nodes, cluster, policies, out, cycle_interval, sample_every, checkpoint_every,
      checkpointable, power_down_after, cpu_per_gpu, memory_per_gpu, scheduler_config;
  bool migrations = false;
  bool drains = false;
};

[[noreturn]] void fail(int code, const Error& error) {
  std::fprintf(stderr, "cnlab sim replay: %s\n", error.to_string().c_str());
  throw CLI::RuntimeError(code);
}

std::string single(const char* flag, const std::vector<std::string>& values, std::string fallback = "") {
  if (values.size() > 1) fail(kBadInput, Error::invalid_argument(flag, join(values, " "), "may be given once"));
  return values.empty() ? fallback : values[0];
}

Duration duration_flag(const char* flag, const std::vector<std::string>& values, const char* fallback, Duration min) {
  std::string text = single(flag, values, fallback);
  auto d = parse_duration(trim(text), flag);
  if (!d) fail(kBadInput, d.error());
  if (*d < min) {
    fail(kBadInput, Error::invalid_argument(flag, text, fmt::format("must be at least {}", format_duration(min))));
  }
  return *d;
}

std::vector<std::string> parse_policy_list(const std::string& text) {
  std::vector<std::string> keys;
  for (std::string_view part : split(text, ',')) {
    std::string key = to_lower(trim(part));
    if (key.empty() || std::find(replay_policy_keys().begin(), replay_policy_keys().end(), key) == replay_policy_keys().end()) {
      fail(kBadInput, Error::invalid_argument("--policies", std::string(trim(part)),
                                              fmt::format("unknown replay policy; valid: {}", join(replay_policy_keys(), ","))));
    }
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  return keys;
}

HostPerGpu host_flags(const ReplayFlags& given) {
  HostPerGpu host;
  std::string cpu = single("--cpu-per-gpu", given.cpu_per_gpu);
  if (!cpu.empty()) {
    auto cores = parse_double(trim(cpu), "--cpu-per-gpu");
    if (!cores || !(*cores > 0) || *cores > kMaxCoresPerGpu) {
      fail(kBadInput, Error::invalid_argument("--cpu-per-gpu", cpu,
                                              fmt::format("must be a number of CPU cores per GPU, 0 < cores <= {}", kMaxCoresPerGpu)));
    }
    host.cpu_milli = static_cast<int64_t>(std::llround(*cores * 1000));
  }
  std::string memory = single("--memory-per-gpu", given.memory_per_gpu);
  if (!memory.empty()) {
    auto mib = model::parse_memory_mib(trim(memory), "--memory-per-gpu");
    if (!mib) fail(kBadInput, mib.error());
    if (*mib > kMaxMemoryPerGpuMib) fail(kBadInput, Error::invalid_argument("--memory-per-gpu", memory, "must be at most 64Ti"));
    host.memory_mib = *mib;
  }
  return host;
}

// `config` with live migration for room on: 8 moves per cycle unless it names another number, its
// other migration settings as they are (by default a waiting job moves up to 4 jobs of its tier or
// below, each at most once an hour), GPU jobs always included: the replay assumes nodes with
// cuda-checkpoint.
sched::PolicyConfig moves_config(sched::PolicyConfig config) {
  if (config.max_migrations_per_cycle == 0) config.max_migrations_per_cycle = 8;
  config.migrate_gpu_jobs = true;
  config.max_drain_moves_per_cycle = 0;  // moves for room only: cnlab+drains adds the drains
  return config;
}

// cnlab+moves with drains for power-down on too: 4 drain moves per cycle unless `config` names
// another number; the scheduler's power_down_after is the replay's, so that the jobs it leaves to
// finish are those whose end the replay's power-down measure would wait for anyway.
sched::PolicyConfig drains_config(const sched::PolicyConfig& config, Duration power_down_after) {
  sched::PolicyConfig drains = moves_config(config);
  drains.max_drain_moves_per_cycle = config.max_drain_moves_per_cycle > 0 ? config.max_drain_moves_per_cycle : 4;
  drains.power_down_after = power_down_after;
  return drains;
}

std::string describe_drains(const sched::PolicyConfig& c) {
  return fmt::format(
      "cnlab+drains is cnlab+moves that also empties lightly used nodes for power-down when no job waits for room "
      "(at most {} drain moves per cycle, {} jobs per node, none that ends within {}, onto busy nodes that keep {:.0f}% "
      "of their capacity free)",
      c.max_drain_moves_per_cycle, c.max_moves_per_job, format_duration(c.power_down_after), c.drain_reserve * 100);
}

std::string describe_moves(const sched::PolicyConfig& c) {
  return fmt::format(
      "cnlab+moves is cnlab that may also move running checkpointable jobs live to make room for a waiting job "
      "(at most {} moves per waiting job and {} per cycle, a job at most once per {}, for jobs that would wait "
      "longer than {}, movers {}); a move pauses its job {} ms + {} ms per GiB of host memory, and the job ends "
      "that much later",
      c.max_moves_per_job, c.max_migrations_per_cycle, format_duration(c.migration_cooldown),
      format_duration(c.migrate_after_wait), c.move_higher_tiers ? "of any tier" : "of the job's tier or below",
      c.migration_pause_base.count(), c.migration_pause_per_gib.count());
}

void run_replay_command(const ReplayFlags& given, const std::vector<std::string>& extras) {
  if (!extras.empty()) {
    fail(kBadInput, Error::invalid_argument("argument", extras[0],
                                            "unknown; allowed: --trace, --nodes, --cluster, --policies, --out, "
                                            "--cycle-interval, --sample-every, --checkpoint-every, --checkpointable, "
                                            "--power-down-after, --cpu-per-gpu, --memory-per-gpu, --migrations, --drains, --scheduler-config "
                                            "(see cnlab sim replay --help)"));
  }
  const std::string trace_path = single("--trace", given.trace);
  const std::string nodes_path = single("--nodes", given.nodes);
  const std::string cluster_spec = single("--cluster", given.cluster);
  const std::string out_dir = single("--out", given.out);
  if (trace_path.empty()) fail(kBadInput, Error::invalid_argument("--trace", "", "required: the openb pod list or generic CSV to replay"));
  if (nodes_path.empty() == cluster_spec.empty()) {
    fail(kBadInput, Error::invalid_argument(nodes_path.empty() ? "--nodes/--cluster" : "--nodes and --cluster",
                                            nodes_path.empty() ? "" : nodes_path + " " + cluster_spec,
                                            "give exactly one: --nodes NODES.csv (an openb node list) or --cluster "
                                            "COUNT:MODELxGPUS[,...] such as 300:h100x8,20:l4x2"));
  }
  if (out_dir.empty()) fail(kBadInput, Error::invalid_argument("--out", "", "required: the output directory"));
  if (!nodes_path.empty() && (!given.cpu_per_gpu.empty() || !given.memory_per_gpu.empty())) {
    fail(kBadInput, Error::invalid_argument(given.cpu_per_gpu.empty() ? "--memory-per-gpu" : "--cpu-per-gpu",
                                            single("--cpu-per-gpu", given.cpu_per_gpu) + single("--memory-per-gpu", given.memory_per_gpu),
                                            "only with --cluster: an openb node list carries each node's CPU and memory"));
  }
  const std::vector<std::string> policies = parse_policy_list(single("--policies", given.policies, "fifo,cnlab"));
  ReplayOptions options;
  options.cycle_interval = duration_flag("--cycle-interval", given.cycle_interval, "10s", Duration{1});
  options.sample_every = duration_flag("--sample-every", given.sample_every, "5m", Duration{1});
  options.checkpoint_every = duration_flag("--checkpoint-every", given.checkpoint_every, "30m", Duration{1});
  options.power_down_after = duration_flag("--power-down-after", given.power_down_after, "30m", Duration{0});
  auto rule = parse_checkpoint_rule(single("--checkpointable", given.checkpointable, "all"), "--checkpointable");
  if (!rule) fail(kBadInput, rule.error());
  options.checkpointable = *rule;
  const HostPerGpu host = host_flags(given);

  std::vector<model::Node> nodes;
  std::string cluster_source;
  if (!nodes_path.empty()) {
    auto list = load_openb_nodes(nodes_path);
    if (!list) fail(kBadInput, list.error());
    auto built = nodes_from_openb(*list, nodes_path);
    if (!built) fail(kBadInput, built.error());
    nodes = std::move(*built);
    cluster_source = "--nodes " + nodes_path;
  } else {
    auto built = parse_cluster_spec(cluster_spec, host);
    if (!built) fail(kBadInput, built.error());
    nodes = std::move(*built);
    cluster_source = fmt::format("--cluster {}, {} cores and {} per GPU", cluster_spec,
                                 static_cast<double>(host.cpu_milli) / 1000, model::format_memory_mib(host.memory_mib));
  }
  int64_t gpus = 0;
  for (const model::Node& n : nodes) gpus += static_cast<int64_t>(n.gpus.size());
  if (gpus == 0) fail(kBadInput, Error::invalid_argument("--nodes", nodes_path, "the node list has no GPUs"));

  auto trace = load_replay_trace(trace_path);
  if (!trace) fail(kBadInput, trace.error());

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec || !std::filesystem::is_directory(out_dir, ec)) {
    fail(kBadInput, Error::invalid_argument("--out", out_dir, fmt::format("cannot create the output directory: {}", ec.message())));
  }

  sched::PolicyConfig scheduler;
  const std::string scheduler_file = single("--scheduler-config", given.scheduler_config);
  if (!scheduler_file.empty()) {
    auto read = sched::policy_config_from_file(scheduler_file, "--scheduler-config");
    if (!read) fail(kBadInput, read.error());
    scheduler = std::move(*read);
    options.scheduler_settings = "--scheduler-config " + scheduler_file + ": " + to_json(scheduler).dump();
  } else {
    // The defaults that decide who waits, so that a summary says what it measured.
    std::string orders;
    for (const auto& tier : scheduler.tiers) {
      orders += (orders.empty() ? "" : ", ") + tier.name + " " + sched::queue_order_name(tier.order);
    }
    options.scheduler_settings = "defaults; the order of a user's waiting jobs per tier: " + orders;
  }

  // One thread per policy: the runs share nothing but the trace and the nodes, read-only.
  std::vector<std::unique_ptr<ReplayPolicy>> made;
  for (const std::string& key : policies) {
    auto policy = key == "cnlab" ? Result<std::unique_ptr<ReplayPolicy>>(std::make_unique<CnlabReplayPolicy>(scheduler))
                                 : make_replay_policy(key);
    if (!policy) fail(kBadInput, policy.error());
    made.push_back(std::move(*policy));
  }
  if (given.migrations || given.drains) options.migration_settings = describe_moves(moves_config(scheduler));
  if (given.migrations) made.push_back(std::make_unique<CnlabReplayPolicy>(moves_config(scheduler), "cnlab+moves"));
  if (given.drains) {
    const sched::PolicyConfig drains = drains_config(scheduler, options.power_down_after);
    made.push_back(std::make_unique<CnlabReplayPolicy>(drains, "cnlab+drains"));
    options.migration_settings += "; " + describe_drains(drains);
  }
  std::vector<std::atomic<uint64_t>> progress(made.size());
  std::vector<ReplayOptions> per_policy(made.size(), options);
  std::vector<std::future<Result<ReplayRun>>> futures;
  for (size_t i = 0; i < made.size(); ++i) {
    per_policy[i].progress = [&progress, i](uint64_t events) { progress[i].store(events, std::memory_order_relaxed); };
    futures.push_back(std::async(std::launch::async, [&, i] { return run_replay(*trace, nodes, *made[i], per_policy[i]); }));
  }
  ProgressBar bar(stderr, "events");
  const uint64_t total = replay_event_count(*trace) * made.size();
  for (auto& f : futures) {
    while (f.wait_for(kProgressPoll) != std::future_status::ready) {
      uint64_t done = 0;
      for (const auto& p : progress) done += p.load(std::memory_order_relaxed);
      bar.update(static_cast<size_t>(std::min(done, total)), static_cast<size_t>(total));
    }
  }
  bar.finish();
  std::vector<ReplayRun> runs;
  for (auto& f : futures) {
    auto run = f.get();
    if (!run) fail(kInternalFailure, run.error());
    runs.push_back(std::move(*run));
  }

  const std::filesystem::path out(out_dir);
  const std::string summary =
      replay_summary_markdown({*trace, describe_cluster(nodes), cluster_source, options, runs});
  const std::pair<std::string, std::string> files[] = {
      {(out / "summary.md").string(), summary},
      {(out / "timeseries.csv").string(), replay_timeseries_csv(runs)},
      {(out / "jobs.csv").string(), replay_jobs_csv(*trace, runs)},
      {(out / "replay.svg").string(), replay_svg(runs)},
  };
  for (const auto& [path, text] : files) {
    if (auto written = write_text_file(path, text); !written) fail(kBadInput, written.error());
  }
  std::fputs(summary.c_str(), stdout);
  // Run times vary from machine to machine, so they go to the terminal, not into summary.md.
  std::printf("\nseconds per policy:");
  for (size_t i = 0; i < runs.size(); ++i) {
    std::printf("%s %s %.2f (%llu cycles)", i == 0 ? "" : ";", runs[i].policy.c_str(), runs[i].wall_seconds,
                static_cast<unsigned long long>(runs[i].cycles));
  }
  std::printf("\nwrote %s, %s, %s, %s\n", files[0].first.c_str(), files[1].first.c_str(), files[2].first.c_str(),
              files[3].first.c_str());
}

}  // namespace

void add_replay_command(CLI::App& sim) {
  CLI::App* replay = sim.add_subcommand(
      "replay",
      "The trace replay experiment: jobs arrive, queue, run for their durations and leave; CNLab's scheduler "
      "and a plain FIFO cluster side by side on the same cluster and trace");
  replay->allow_extras();
  auto flags = std::make_shared<ReplayFlags>();
  add_text_flag(replay, "--trace", flags->trace, "Trace: an openb pod list with times, or a generic CSV (submit_time,duration,num_gpus,...)");
  add_text_flag(replay, "--nodes", flags->nodes, "Cluster from an openb node list CSV (sn,cpu_milli,memory_mib,gpu,model)");
  add_text_flag(replay, "--cluster", flags->cluster, "Cluster from a spec COUNT:MODELxGPUS[,...], e.g. 300:h100x8,20:l4x2");
  add_text_flag(replay, "--policies", flags->policies, "Comma list of policies (default: " + join(replay_policy_keys(), ",") + ")");
  add_text_flag(replay, "--out", flags->out, "Output directory (created if needed)");
  add_text_flag(replay, "--cycle-interval", flags->cycle_interval, "At most one scheduling cycle per this much simulated time (default 10s)");
  add_text_flag(replay, "--sample-every", flags->sample_every, "Time-series sample at least this often (default 5m)");
  add_text_flag(replay, "--checkpoint-every", flags->checkpoint_every, "Checkpointable jobs save their work this often (default 30m)");
  add_text_flag(replay, "--checkpointable", flags->checkpointable, "Which jobs resume from a checkpoint: all, none or CLASS,... (default all)");
  add_text_flag(replay, "--power-down-after", flags->power_down_after, "A node idle this long could be powered down (default 30m)");
  add_text_flag(replay, "--cpu-per-gpu", flags->cpu_per_gpu, "--cluster nodes: CPU cores per GPU (default 16)");
  add_text_flag(replay, "--memory-per-gpu", flags->memory_per_gpu, "--cluster nodes: host memory per GPU (default 128Gi)");
  add_text_flag(replay, "--scheduler-config", flags->scheduler_config,
                "JSON file of scheduler settings for cnlab (and cnlab+moves), as `cnlab server --scheduler-config` takes");
  replay->add_flag("--migrations", flags->migrations,
                   "Also run cnlab+moves: CNLab's scheduler that may move running checkpointable jobs live to make room "
                   "for waiting ones (each move costs its job a pause)");
  replay->add_flag("--drains", flags->drains,
                   "Also run cnlab+drains: cnlab+moves that also moves every job off lightly used nodes onto busy ones "
                   "when no job waits, so that the emptied nodes can power down");
  replay->callback([replay, flags] { run_replay_command(*flags, replay->remaining()); });
}

}  // namespace cnlab::sim
