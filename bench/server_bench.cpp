// Control-plane benchmarks (results: docs/benchmarks/server.md). Each mode is a flag; --all runs
// the four with their defaults (what `make bench` runs, about two minutes):
//   --submit   durable submissions/s through the REST API over TLS, keep-alive, concurrent clients
//   --bound    submit-to-bound latency on an idle cluster, seen through a watch
//   --fanout   watch fan-out: 1,000 node-filtered + 50 unfiltered watchers under ~1,000 events/s
//   --loop     the scheduling loop's cycle at 4,000 nodes / 140,000 jobs (in-process, SQLite store),
//              snapshot upkeep included, beside sched::run_cycle on the same workload
// Modes 1-3 start the real `cnlab server` binary on a fresh data directory under $TMPDIR; the
// clients run in this process, on the same cores as the server.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <queue>
#include <set>
#include <thread>
#include <unordered_map>

#include "report.h"
#include "server_cluster.h"
#include "server_loop_bench.h"
#include "workload.h"

namespace cnlab::bench {
namespace {

constexpr const char* kJobBody = R"({"spec":{"project":"default","gpu":"h100-1","command":["true"]}})";

int fail(const std::string& mode, const Error& error) {
  std::fprintf(stderr, "server_bench %s: %s\n", mode.c_str(), error.to_string().c_str());
  return 1;
}

// Extra flags for every `cnlab server` started (--server-arg, for experiments such as --workers 16).
std::vector<std::string>& server_args() {
  static std::vector<std::string> args;
  return args;
}
std::vector<std::string> with_server_args(std::vector<std::string> flags) {
  flags.insert(flags.end(), server_args().begin(), server_args().end());
  return flags;
}

// How much a histogram's sum and count grew between two scrapes: (sum, count) of `name` with `labels`.
std::pair<double, double> histogram_delta(const MetricsText& before, const MetricsText& after, const std::string& name,
                                          const std::string& labels = "") {
  double sum = after.value(name + "_sum" + labels) - before.value(name + "_sum" + labels);
  double count = after.value(name + "_count" + labels) - before.value(name + "_count" + labels);
  return {sum, count};
}

// ---------------------------------------------------------------------------------------------
// 1. Durable submissions/s.

// A fresh server with one registered node of `gpus` h100s: the admin's client and the node's
// credential (modes 1 and 2).
struct OneNodeCluster {
  TempDir dir{"cnlab_server_bench"};  // first: it outlives the server
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<net::Client> admin;
  std::string credential;
};

Result<std::unique_ptr<OneNodeCluster>> one_node_cluster(const std::string& node, int gpus) {
  auto cluster = std::make_unique<OneNodeCluster>();
  auto server = ServerProcess::start(cluster->dir.path() + "/data", with_server_args({}));
  if (!server) return server.error();
  cluster->server = std::move(*server);
  auto admin = cluster->server->client(cluster->server->admin_token());
  if (!admin) return admin.error();
  cluster->admin = std::move(*admin);
  auto anonymous = cluster->server->client("");
  if (!anonymous) return anonymous.error();
  auto token = join_token(*cluster->admin);
  if (!token) return token.error();
  auto credential = register_node(**anonymous, *token, node_object(node, "h100", gpus));
  if (!credential) return credential.error();
  cluster->credential = std::move(*credential);
  return cluster;
}

struct SubmitOptions {
  int clients = 64;
  double seconds = 10;
  double warmup = 1;
  int gpus = 8;
};

int submit_throughput(const SubmitOptions& o) {
  const std::string mode = "--submit";
  auto cluster = one_node_cluster("bench-node-0", o.gpus);
  if (!cluster) return fail(mode, cluster.error());
  auto& server = (*cluster)->server;
  auto& admin = (*cluster)->admin;

  std::vector<std::unique_ptr<net::Client>> clients;
  for (int i = 0; i < o.clients; ++i) {
    auto c = server->client(server->admin_token());
    if (!c) return fail(mode, c.error());
    clients.push_back(std::move(*c));
  }
  auto before = scrape(*admin);
  if (!before) return fail(mode, before.error());

  struct PerClient {
    std::vector<double> latencies;
    size_t accepted = 0, refused = 0, failed = 0;
    std::string first_error;
  };
  std::vector<PerClient> results(o.clients);
  std::atomic<bool> go{false};
  Clock::time_point start, window_start, window_end;
  std::vector<std::thread> threads;
  for (int i = 0; i < o.clients; ++i) {
    threads.emplace_back([&, i] {
      go.wait(false);
      PerClient& r = results[i];
      r.latencies.reserve(static_cast<size_t>(o.seconds * 200));
      while (true) {
        auto sent = Clock::now();
        if (sent >= window_end) break;
        auto response = clients[i]->request("POST", "/v1/jobs", kJobBody);
        auto done = Clock::now();
        bool counted = sent >= window_start && done <= window_end;
        if (!response) {
          ++r.failed;
          if (r.first_error.empty()) r.first_error = response.error().to_string();
          continue;
        }
        if (response->status != 201) {
          ++r.refused;
          if (r.first_error.empty())
            r.first_error = std::to_string(response->status) + ": " + response->body.substr(0, 200);
          continue;
        }
        if (counted) {
          ++r.accepted;
          r.latencies.push_back(std::chrono::duration<double>(done - sent).count());
        }
      }
    });
  }
  start = Clock::now();
  window_start = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.warmup));
  window_end = window_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  go = true;
  go.notify_all();
  std::this_thread::sleep_until(window_start);
  double server_cpu0 = server->cpu_seconds(), own_cpu0 = own_cpu_seconds();
  MachineCpu machine0 = machine_cpu();
  std::this_thread::sleep_until(window_end);
  double server_cpu = server->cpu_seconds() - server_cpu0, own_cpu = own_cpu_seconds() - own_cpu0;
  MachineCpu machine1 = machine_cpu();
  double irq = machine1.irq - machine0.irq;
  double others = machine1.busy - machine0.busy - server_cpu - own_cpu - irq;
  for (auto& t : threads) t.join();
  auto after = scrape(*admin);
  if (!after) return fail(mode, after.error());

  std::vector<double> all;
  size_t accepted = 0, refused = 0, failed = 0;
  std::string first_error;
  for (auto& r : results) {
    all.insert(all.end(), r.latencies.begin(), r.latencies.end());
    accepted += r.accepted;
    refused += r.refused;
    failed += r.failed;
    if (first_error.empty()) first_error = r.first_error;
  }
  Percentiles p = percentiles(all);
  auto [handler_sum, handler_n] =
      histogram_delta(*before, *after, "cnlab_http_request_duration_seconds", "{route=\"POST /v1/jobs\"}");
  auto [commit_sum, commit_n] = histogram_delta(*before, *after, "cnlab_store_commit_seconds");
  auto [cycle_sum, cycle_n] = histogram_delta(*before, *after, "cnlab_scheduler_cycle_seconds");
  int64_t rss = server->rss_kib();
  server->stop();

  std::printf("\n== 1. durable submissions through the REST API (TLS, keep-alive) ==\n");
  std::printf(
      "%d clients, each its own connection, POST /v1/jobs (h100-1) back to back for %.0f s after %.0f s warm-up;\n"
      "one node of %d h100; clients and server share this machine's cores\n",
      o.clients, o.seconds, o.warmup, o.gpus);
  std::printf(
      "| jobs accepted | jobs/s | p50 ms | p99 ms | max ms | refused | failed | server CPU | bench CPU | irq+softirq | "
      "other processes |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %zu | %.0f | %.1f | %.1f | %.1f | %zu | %zu | %.0f%% | %.0f%% | %.0f%% | %.0f%% |\n", accepted,
              static_cast<double>(accepted) / o.seconds, ms(p.p50), ms(p.p99), ms(p.max), refused, failed,
              100 * server_cpu / o.seconds, 100 * own_cpu / o.seconds, 100 * irq / o.seconds, 100 * others / o.seconds);
  std::printf("(CPU as %% of one core; the machine has %u)\n", std::thread::hardware_concurrency());
  std::printf(
      "server side (its metrics, whole run): handler mean %.2f ms (%.0f requests), store commit mean %.2f ms "
      "(queue + group commit + fsync), %.0f scheduling cycles, mean %.1f ms (%.1f s in all); server RSS at end %.0f "
      "MiB\n",
      handler_n > 0 ? ms(handler_sum / handler_n) : 0.0, handler_n, commit_n > 0 ? ms(commit_sum / commit_n) : 0.0,
      cycle_n, cycle_n > 0 ? ms(cycle_sum / cycle_n) : 0.0, cycle_sum, static_cast<double>(rss) / 1024);
  std::printf("CPU per accepted job: server %.0f us, bench clients %.0f us\n",
              accepted ? 1e6 * server_cpu / static_cast<double>(accepted) : 0.0,
              accepted ? 1e6 * own_cpu / static_cast<double>(accepted) : 0.0);
  if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  std::fflush(stdout);
  // A stray refusal is reported (it is the server's); more than 1% makes the figure meaningless.
  return (failed + refused) * 100 > accepted ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// 2. Submit to bound on an idle cluster.

struct BoundOptions {
  int jobs = 200;
  int gap_ms = 20;
};

int submit_to_bound(const BoundOptions& o) {
  const std::string mode = "--bound";
  const std::string node = "bench-node-0";
  auto cluster = one_node_cluster(node, 8);
  if (!cluster) return fail(mode, cluster.error());
  auto& server = (*cluster)->server;
  auto& admin = (*cluster)->admin;
  const std::string& credential = (*cluster)->credential;
  auto agent = server->client(credential);
  auto watch_client = server->client(credential, std::chrono::seconds(120));
  if (!agent || !watch_client) return fail(mode, agent ? watch_client.error() : agent.error());
  auto health = call(*admin, "GET", "/healthz", 200);
  if (!health) return fail(mode, health.error());
  int64_t revision = (*health)["revision"].get<int64_t>();

  std::mutex mu;
  std::condition_variable cv;
  std::unordered_map<std::string, int64_t> bound_at;  // job -> when its Scheduled event arrived (ns)
  std::thread watcher([&] {
    std::string partial;
    // Ends when the server stops, after the last job.
    (void)(*watch_client)
        ->stream("GET", fmt::format("/v1/jobs?watch=1&revision={}&node={}", revision, node),
                 [&](std::string_view chunk) {
                   int64_t received = now_ns();
                   partial.append(chunk);
                   size_t start = 0, end;
                   while ((end = partial.find('\n', start)) != std::string::npos) {
                     std::string_view line(partial.data() + start, end - start);
                     if (line.find("\"phase\":\"Scheduled\"") != std::string_view::npos) {
                       Json event = Json::parse(line, nullptr, false);
                       if (!event.is_discarded()) {
                         std::lock_guard lock(mu);
                         bound_at[event["object"]["metadata"]["name"].get<std::string>()] = received;
                       }
                       cv.notify_all();
                     }
                     start = end + 1;
                   }
                   partial.erase(0, start);
                   return true;
                 });
  });
  // The watch must be open before the first job.
  for (int i = 0; i < 500; ++i) {
    auto m = scrape(*admin);
    if (m && m->value("cnlab_watch_streams") >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto before = scrape(*admin);
  if (!before) return fail(mode, before.error());

  std::vector<double> to_bound, to_ack;
  int timeouts = 0;
  std::string first_error;
  for (int i = 0; i < o.jobs; ++i) {
    int64_t sent = now_ns();
    auto submitted = call(*admin, "POST", "/v1/jobs", 201, Json::parse(kJobBody));
    int64_t acked = now_ns();
    if (!submitted) {
      first_error = submitted.error().to_string();
      break;
    }
    std::string id = (*submitted)["metadata"]["name"];
    int64_t bound = 0;
    {
      std::unique_lock lock(mu);
      if (cv.wait_for(lock, std::chrono::seconds(10), [&] { return bound_at.count(id) > 0; })) bound = bound_at[id];
    }
    if (bound == 0) {
      ++timeouts;
      continue;
    }
    to_bound.push_back(static_cast<double>(bound - sent) / 1e9);
    to_ack.push_back(static_cast<double>(acked - sent) / 1e9);
    // The agent's part, so the node is free again for the next job.
    for (const char* phase : {"Running", "Succeeded"}) {
      Json body = {{"phase", phase}};
      if (std::string(phase) == "Succeeded") body["exit_code"] = 0;
      if (auto r = call(**agent, "PUT", "/v1/jobs/" + id + "/status", 200, body); !r && first_error.empty()) {
        first_error = r.error().to_string();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(o.gap_ms));
  }
  auto after = scrape(*admin);
  server->stop();
  watcher.join();
  if (!after) return fail(mode, after.error());
  auto [cycle_sum, cycle_n] = histogram_delta(*before, *after, "cnlab_scheduler_cycle_seconds");
  auto [commit_sum, commit_n] = histogram_delta(*before, *after, "cnlab_store_commit_seconds");

  Percentiles b = percentiles(to_bound), a = percentiles(to_ack);
  std::printf("\n== 2. submit to bound on an idle cluster ==\n");
  std::printf(
      "one node of 8 h100, nothing queued; %d jobs (h100-1) one at a time, %d ms apart; 'bound' is when the\n"
      "node-filtered watch (the agent's view) delivers the job's Scheduled event; each job is then reported\n"
      "Running and Succeeded by the node's credential\n",
      o.jobs, o.gap_ms);
  std::printf("| latency | n | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n");
  std::printf("| submit to bound (watch) | %zu | %.1f | %.1f | %.1f | %.1f |\n", b.n, ms(b.p50), ms(b.p90), ms(b.p99),
              ms(b.max));
  std::printf("| submit to 201 | %zu | %.1f | %.1f | %.1f | %.1f |\n", a.n, ms(a.p50), ms(a.p90), ms(a.p99), ms(a.max));
  std::printf(
      "server side: %.0f cycles, mean %.2f ms (the loop waits a 10 ms debounce before each); API commits mean %.2f "
      "ms\n",
      cycle_n, cycle_n > 0 ? ms(cycle_sum / cycle_n) : 0.0, commit_n > 0 ? ms(commit_sum / commit_n) : 0.0);
  if (timeouts) std::printf("%d jobs not seen bound within 10 s\n", timeouts);
  if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  std::fflush(stdout);
  return timeouts > 0 || !first_error.empty() ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// 3. Watch fan-out.

struct FanoutOptions {
  int nodes = 1000;
  int node_watchers = 1000;
  int watchers = 50;
  double rate = 1000;  // job events per second: 4 per job (created, bound, running, succeeded)
  double seconds = 20;
  int hold_ms = 2000;  // a job runs this long before its agent reports it Succeeded
  int submitters = 4;
  int agents = 8;
};

// The agents' work: report a bound job Running at once and Succeeded `hold_ms` later.
class AgentQueue {
 public:
  struct Task {
    int64_t due_ns;
    int node;
    std::string job;
    bool finish;
    bool operator>(const Task& o) const { return due_ns > o.due_ns; }
  };
  void push(Task task) {
    {
      std::lock_guard lock(mu_);
      tasks_.push(std::move(task));
    }
    cv_.notify_one();
  }
  std::optional<Task> pop() {
    std::unique_lock lock(mu_);
    while (true) {
      if (stop_) return std::nullopt;
      if (!tasks_.empty()) {
        int64_t wait = tasks_.top().due_ns - now_ns();
        if (wait <= 0) {
          Task t = tasks_.top();
          tasks_.pop();
          return t;
        }
        cv_.wait_for(lock, std::chrono::nanoseconds(wait));
      } else {
        cv_.wait(lock);
      }
    }
  }
  size_t size() {
    std::lock_guard lock(mu_);
    return tasks_.size();
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Task, std::vector<Task>, std::greater<>> tasks_;
  bool stop_ = false;
};

int watch_fanout(const FanoutOptions& o) {
  const std::string mode = "--fanout";
  auto setup_started = Clock::now();
  TempDir dir("cnlab_server_bench");
  // Nodes never heartbeat here: keep them Ready for the run.
  auto server =
      ServerProcess::start(dir.path() + "/data", with_server_args({"--not-ready-after", "30m", "--lost-after", "60m"}));
  if (!server) return fail(mode, server.error());
  ServerProcess& s = **server;
  auto admin = s.client(s.admin_token());
  if (!admin) return fail(mode, admin.error());

  // Register the nodes from a few threads, each with its own join token (registrations with one
  // token compare-and-swap its use count).
  std::vector<std::string> names(o.nodes), credentials(o.nodes);
  std::atomic<int> registration_errors{0};
  std::string registration_error;
  std::mutex error_mu;
  {
    const int threads_n = 8;
    std::vector<std::string> tokens;
    for (int t = 0; t < threads_n; ++t) {
      auto token = join_token(**admin);
      if (!token) return fail(mode, token.error());
      tokens.push_back(*token);
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < threads_n; ++t) {
      threads.emplace_back([&, t] {
        auto anonymous = s.client("");
        for (int n = t; n < o.nodes; n += threads_n) {
          names[n] = fmt::format("node-{:04}", n);
          Result<std::string> credential = anonymous
                                               ? register_node(**anonymous, tokens[t], node_object(names[n], "h100", 8))
                                               : Result<std::string>(anonymous.error());
          if (credential) {
            credentials[n] = *credential;
          } else {
            ++registration_errors;
            std::lock_guard lock(error_mu);
            registration_error = credential.error().to_string();
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  if (registration_errors > 0) return fail(mode, Error::internal("registering nodes: " + registration_error));
  double registration_seconds = seconds_since(setup_started);
  auto health = call(**admin, "GET", "/healthz", 200);
  if (!health) return fail(mode, health.error());
  const int64_t revision = (*health)["revision"].get<int64_t>();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  int64_t rss_before = s.rss_kib();

  // The watchers. Each records (revision, when received) for every event line.
  struct Watcher {
    int node = -1;  // -1: unfiltered
    std::vector<std::pair<int64_t, int64_t>> received;
    size_t scheduled = 0, errors = 0;
    bool ended_early = false;  // the stream ended before the benchmark stopped the server
    std::string end_reason;
  };
  const int total_watchers = o.node_watchers + o.watchers;
  std::vector<Watcher> watchers(total_watchers);
  std::atomic<bool> stopping{false};
  std::atomic<int> connect_failures{0};
  AgentQueue agents;
  Threads watcher_threads(256 << 10);
  auto connect_started = Clock::now();
  for (int w = 0; w < total_watchers; ++w) {
    Watcher& me = watchers[w];
    me.node = w < o.node_watchers ? w % o.nodes : -1;
    me.received.reserve(me.node < 0 ? static_cast<size_t>(o.rate * (o.seconds + 5) * 1.2) : 64);
    watcher_threads.spawn([&, w] {
      Watcher& me = watchers[w];
      // Node watchers watch as their agent does (the node's credential); the others as the admin.
      auto client = s.client(me.node >= 0 ? credentials[me.node] : s.admin_token(), std::chrono::seconds(300));
      if (!client) {
        ++connect_failures;
        me.ended_early = true;
        me.end_reason = client.error().to_string();
        return;
      }
      std::string target = fmt::format("/v1/jobs?watch=1&revision={}", revision);
      if (me.node >= 0) target += "&node=" + names[me.node];
      std::string partial;
      auto result = (*client)->stream("GET", target, [&](std::string_view chunk) {
        int64_t received = now_ns();
        partial.append(chunk);
        size_t start = 0, end;
        while ((end = partial.find('\n', start)) != std::string::npos) {
          std::string_view line(partial.data() + start, end - start);
          start = end + 1;
          if (line.find("\"type\":\"ERROR\"") != std::string_view::npos) {
            ++me.errors;
            continue;
          }
          me.received.emplace_back(first_revision(line), received);
          if (me.node >= 0 && line.find("\"phase\":\"Scheduled\"") != std::string_view::npos) {
            Json event = Json::parse(line, nullptr, false);
            if (event.is_discarded()) continue;
            ++me.scheduled;
            agents.push({received, me.node, event["object"]["metadata"]["name"].get<std::string>(), false});
          }
        }
        partial.erase(0, start);
        return true;
      });
      me.ended_early = !stopping;
      me.end_reason = result ? "status " + std::to_string(*result) : result.error().to_string();
    });
  }
  // Wait until every watch is open.
  double open_watchers = 0;
  for (int i = 0; i < 1200 && open_watchers < total_watchers; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto m = scrape(**admin);
    if (m) open_watchers = m->value("cnlab_watch_streams");
    if (connect_failures > 0) break;
  }
  double connect_seconds = seconds_since(connect_started);
  if (open_watchers < total_watchers) {
    stopping = true;
    s.stop();
    watcher_threads.join();
    std::string why;
    for (auto& w : watchers) {
      if (!w.end_reason.empty()) {
        why = w.end_reason;
        break;
      }
    }
    return fail(mode, Error::internal(fmt::format("only {} of {} watches opened in {:.0f} s ({} connect failures): {}",
                                                  open_watchers, total_watchers, connect_seconds,
                                                  connect_failures.load(), why)));
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  int64_t rss_watching = s.rss_kib();

  // Writers: submitters at rate/4 jobs per second, agents reporting Running then Succeeded.
  struct Write {
    int64_t revision, sent, acked;
  };
  std::mutex writes_mu;
  std::vector<Write> writes;
  std::atomic<size_t> write_errors{0};
  std::string write_error;
  auto record = [&](int64_t revision, int64_t sent, int64_t acked) {
    std::lock_guard lock(writes_mu);
    writes.push_back({revision, sent, acked});
  };
  auto note_error = [&](const std::string& e) {
    ++write_errors;
    std::lock_guard lock(writes_mu);
    if (write_error.empty()) write_error = e;
  };
  const double jobs_per_second = o.rate / 4;
  const int64_t period_ns = static_cast<int64_t>(1e9 / jobs_per_second);
  const int64_t run_start = now_ns() + 100'000'000;
  const int64_t run_end = run_start + static_cast<int64_t>(o.seconds * 1e9);
  std::atomic<int64_t> next_slot{0};
  std::atomic<size_t> submitted{0};
  double server_cpu0 = 0, own_cpu0 = 0;
  std::vector<std::thread> writers;
  for (int i = 0; i < o.submitters; ++i) {
    writers.emplace_back([&] {
      auto client = s.client(s.admin_token());
      if (!client) return note_error(client.error().to_string());
      while (true) {
        int64_t slot = run_start + next_slot++ * period_ns;
        if (slot >= run_end) return;
        int64_t wait = slot - now_ns();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
        int64_t sent = now_ns();
        auto r = call(**client, "POST", "/v1/jobs", 201,
                      Json::parse(R"({"spec":{"project":"default","gpu":"h100x8","command":["true"]}})"));
        int64_t acked = now_ns();
        if (!r) {
          note_error(r.error().to_string());
          continue;
        }
        ++submitted;
        record((*r)["metadata"]["revision"].get<int64_t>(), sent, acked);
      }
    });
  }
  std::atomic<size_t> finished{0};
  for (int i = 0; i < o.agents; ++i) {
    writers.emplace_back([&] {
      auto client = s.client("");
      if (!client) return note_error(client.error().to_string());
      while (auto task = agents.pop()) {
        Json body = {{"phase", task->finish ? "Succeeded" : "Running"}};
        if (task->finish) body["exit_code"] = 0;
        int64_t sent = now_ns();
        auto r = call(**client, "PUT", "/v1/jobs/" + task->job + "/status", 200, body,
                      {{"authorization", "Bearer " + credentials[task->node]}});
        int64_t acked = now_ns();
        if (!r) {
          note_error(r.error().to_string());
          continue;
        }
        record((*r)["metadata"]["revision"].get<int64_t>(), sent, acked);
        if (task->finish) {
          ++finished;
        } else {
          agents.push({acked + static_cast<int64_t>(o.hold_ms) * 1'000'000, task->node, task->job, true});
        }
      }
    });
  }
  // Memory while it runs, every 250 ms.
  std::vector<std::pair<double, int64_t>> rss_samples;
  std::this_thread::sleep_for(std::chrono::nanoseconds(run_start - now_ns()));
  server_cpu0 = s.cpu_seconds();
  own_cpu0 = own_cpu_seconds();
  MachineCpu machine0 = machine_cpu();
  while (now_ns() < run_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    rss_samples.emplace_back(static_cast<double>(now_ns() - run_start) / 1e9, s.rss_kib());
  }
  double server_cpu = s.cpu_seconds() - server_cpu0, own_cpu = own_cpu_seconds() - own_cpu0;
  MachineCpu machine1 = machine_cpu();
  double irq = machine1.irq - machine0.irq;
  double others = machine1.busy - machine0.busy - server_cpu - own_cpu - irq;
  // Let the last jobs finish and their events arrive.
  for (int i = 0; i < 100 && (agents.size() > 0 || finished < submitted); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  int64_t rss_after = s.rss_kib();
  int64_t rss_peak = s.peak_rss_kib();
  auto metrics = scrape(**admin);
  agents.stop();
  for (size_t i = 0; i < writers.size(); ++i) writers[i].join();
  stopping = true;
  s.stop();
  watcher_threads.join();

  // Latency: receipt against the write that made the event (the scheduler's bindings have no
  // client-side write and are left out).
  std::unordered_map<int64_t, std::pair<int64_t, int64_t>> by_revision;
  for (const auto& w : writes) by_revision[w.revision] = {w.sent, w.acked};
  std::vector<double> from_ack_unfiltered, from_sent_unfiltered, from_ack_node, from_sent_node;
  size_t unfiltered_lines = 0, node_lines = 0, scheduled = 0, errors = 0, cut_off = 0, ended_early = 0;
  std::string cut_reason;
  for (const auto& w : watchers) {
    bool unfiltered = w.node < 0;
    (unfiltered ? unfiltered_lines : node_lines) += w.received.size();
    scheduled += w.scheduled;
    errors += w.errors;
    for (const auto& [rev, at] : w.received) {
      auto it = by_revision.find(rev);
      if (it == by_revision.end()) continue;
      double from_sent = static_cast<double>(at - it->second.first) / 1e9;
      double from_ack = std::max(0.0, static_cast<double>(at - it->second.second) / 1e9);
      (unfiltered ? from_sent_unfiltered : from_sent_node).push_back(from_sent);
      (unfiltered ? from_ack_unfiltered : from_ack_node).push_back(from_ack);
    }
    if (w.ended_early) {
      ++ended_early;
      if (cut_reason.empty()) cut_reason = w.end_reason;
    }
  }
  // A watcher cut off before the stop has fewer lines than the first unfiltered one.
  size_t expected = watchers[o.node_watchers].received.size();
  for (int w = o.node_watchers; w < total_watchers; ++w) {
    if (watchers[w].received.size() < expected) ++cut_off;
  }
  std::set<int> nodes_used;
  for (const auto& w : watchers) {
    if (w.node >= 0 && w.scheduled > 0) nodes_used.insert(w.node);
  }
  double event_rate = static_cast<double>(expected) / o.seconds;
  Percentiles us = percentiles(from_sent_unfiltered), ua = percentiles(from_ack_unfiltered);
  Percentiles ns = percentiles(from_sent_node), na = percentiles(from_ack_node);
  std::vector<double> write_latency;
  for (const auto& w : writes) write_latency.push_back(static_cast<double>(w.acked - w.sent) / 1e9);
  Percentiles wl = percentiles(write_latency);
  int64_t rss_during_max = 0;
  for (const auto& [t, kib] : rss_samples) rss_during_max = std::max(rss_during_max, kib);
  auto rss_at = [&](double fraction) {
    if (rss_samples.empty()) return int64_t{0};
    size_t i =
        std::min(rss_samples.size() - 1, static_cast<size_t>(fraction * static_cast<double>(rss_samples.size())));
    return rss_samples[i].second;
  };
  auto mib = [](int64_t kib) { return static_cast<double>(kib) / 1024; };

  std::printf("\n== 3. watch fan-out ==\n");
  std::printf(
      "%d nodes (8 h100 each, registered in %.1f s); %d watchers filtered to one node each (node credential,\n"
      "?node=NAME) and %d unfiltered (admin), all from revision %lld, open in %.1f s; for %.0f s: %.0f jobs/s\n"
      "submitted (h100x8), each bound by the scheduler, reported Running at once and Succeeded %d ms later:\n"
      "4 job events per job, %.0f events/s asked\n",
      o.nodes, registration_seconds, o.node_watchers, o.watchers, static_cast<long long>(revision), connect_seconds,
      o.seconds, jobs_per_second, o.hold_ms, o.rate);
  std::printf(
      "events committed and seen by each unfiltered watcher: %zu (%.0f/s); jobs submitted %zu, finished %zu; "
      "jobs bound on %zu distinct nodes\n",
      expected, event_rate, submitted.load(), finished.load(), nodes_used.size());
  std::printf(
      "lines delivered: %zu to unfiltered watchers (%.0f/s), %zu to node watchers; ERROR lines %zu; "
      "unfiltered watchers short of the first one's count: %zu\n",
      unfiltered_lines, static_cast<double>(unfiltered_lines) / o.seconds, node_lines, errors, cut_off);
  std::printf(
      "| delivery latency (events written by the bench) | samples | p50 ms | p90 ms | p99 ms | max ms |\n"
      "|---|---:|---:|---:|---:|---:|\n");
  std::printf("| unfiltered, from the write's request sent | %zu | %.1f | %.1f | %.1f | %.1f |\n", us.n, ms(us.p50),
              ms(us.p90), ms(us.p99), ms(us.max));
  std::printf("| unfiltered, from the write's response | %zu | %.1f | %.1f | %.1f | %.1f |\n", ua.n, ms(ua.p50),
              ms(ua.p90), ms(ua.p99), ms(ua.max));
  std::printf("| node-filtered, from the write's request sent | %zu | %.1f | %.1f | %.1f | %.1f |\n", ns.n, ms(ns.p50),
              ms(ns.p90), ms(ns.p99), ms(ns.max));
  std::printf("| node-filtered, from the write's response | %zu | %.1f | %.1f | %.1f | %.1f |\n", na.n, ms(na.p50),
              ms(na.p90), ms(na.p99), ms(na.max));
  std::printf("| (the writes themselves: request to response) | %zu | %.1f | %.1f | %.1f | %.1f |\n", wl.n, ms(wl.p50),
              ms(wl.p90), ms(wl.p99), ms(wl.max));
  std::printf(
      "| server RSS | before watchers | %d idle watchers | during: at 25%% / 50%% / 100%% of the run | max "
      "sampled | after (idle, watchers open) | peak (VmHWM) |\n|---|---:|---:|---:|---:|---:|---:|\n",
      total_watchers);
  std::printf("| MiB | %.0f | %.0f | %.0f / %.0f / %.0f | %.0f | %.0f | %.0f |\n", mib(rss_before), mib(rss_watching),
              mib(rss_at(0.25)), mib(rss_at(0.5)), mib(rss_at(0.999)), mib(rss_during_max), mib(rss_after),
              mib(rss_peak));
  std::printf(
      "CPU during the run, %% of one core: server %.0f%%, bench (watchers, writers) %.0f%%, irq+softirq %.0f%%, "
      "other processes %.0f%%; write errors %zu\n",
      100 * server_cpu / o.seconds, 100 * own_cpu / o.seconds, 100 * irq / o.seconds, 100 * others / o.seconds,
      write_errors.load());
  if (metrics) {
    auto cycles = metrics->value("cnlab_scheduler_cycle_seconds_count");
    std::printf("scheduler: %.0f cycles, mean %.1f ms\n", cycles,
                cycles > 0 ? ms(metrics->value("cnlab_scheduler_cycle_seconds_sum") / cycles) : 0.0);
  }
  if (!write_error.empty()) std::printf("first write error: %s\n", write_error.c_str());
  if (ended_early > 0)
    std::printf("%zu streams ended before the end of the run; the first: %s\n", ended_early, cut_reason.c_str());
  std::fflush(stdout);
  return write_errors > 0 ? 1 : 0;
}

}  // namespace
}  // namespace cnlab::bench

int main(int argc, char** argv) {
  using namespace cnlab::bench;
  CLI::App app{"CNLab control-plane benchmarks (docs/benchmarks/server.md)"};
  bool all = false, submit = false, bound = false, fanout = false, loop = false;
  SubmitOptions so;
  BoundOptions bo;
  FanoutOptions fo;
  LoopOptions lo;
  app.add_flag("--all", all, "Run the four benchmarks with their defaults");
  app.add_flag("--submit", submit, "1. Durable submissions/s through the REST API");
  app.add_flag("--bound", bound, "2. Submit to bound latency on an idle cluster");
  app.add_flag("--fanout", fanout, "3. Watch fan-out latency and server memory");
  app.add_flag("--loop", loop, "4. The scheduling loop's cycle against the bare cycle");
  app.add_option("--server-arg", server_args(),
                 "A flag for every `cnlab server` started (repeat; e.g. --server-arg=--workers --server-arg=16)");
  app.add_option("--clients", so.clients, "--submit: concurrent clients")->capture_default_str();
  app.add_option("--seconds", so.seconds, "--submit: measured seconds")->capture_default_str();
  app.add_option("--gpus", so.gpus, "--submit: GPUs on the one node")->capture_default_str();
  app.add_option("--bound-jobs", bo.jobs, "--bound: jobs")->capture_default_str();
  app.add_option("--gap-ms", bo.gap_ms, "--bound: pause between jobs")->capture_default_str();
  app.add_option("--nodes", fo.nodes, "--fanout: registered nodes")->capture_default_str();
  app.add_option("--node-watchers", fo.node_watchers, "--fanout: watchers filtered to one node")->capture_default_str();
  app.add_option("--watchers", fo.watchers, "--fanout: unfiltered watchers")->capture_default_str();
  app.add_option("--rate", fo.rate, "--fanout: job events per second")->capture_default_str();
  app.add_option("--fanout-seconds", fo.seconds, "--fanout: seconds of load")->capture_default_str();
  app.add_option("--hold-ms", fo.hold_ms, "--fanout: how long each job runs")->capture_default_str();
  app.add_option("--loop-nodes", lo.nodes, "--loop: nodes (35 jobs each)")->capture_default_str();
  app.add_option("--loop-cycles", lo.cycles, "--loop: steady-state cycles")->capture_default_str();
  app.add_flag("--loop-verbose", lo.verbose, "--loop: a line per steady-state cycle");
  app.add_option("--loop-change", lo.change, "--loop: fraction of jobs changed between cycles")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!(all || submit || bound || fanout || loop)) {
    std::fprintf(stderr,
                 "server_bench: choose --all or one or more of --submit --bound --fanout --loop (see --help)\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);  // the in-process loop's info lines (--loop)
  print_machine_line();
  if (!server_args().empty()) {
    std::string joined;
    for (const auto& a : server_args()) joined += " " + a;
    std::printf("cnlab server started with:%s\n", joined.c_str());
  }
  int status = 0;
  if (all || submit) status |= submit_throughput(so);
  if (all || bound) status |= submit_to_bound(bo);
  if (all || fanout) status |= watch_fanout(fo);
  if (all || loop) status |= run_loop_bench(lo);
  return status;
}
