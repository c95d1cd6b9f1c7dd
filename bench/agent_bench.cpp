// Node agent benchmarks (results: docs/benchmarks/agent.md). Each mode is a flag; --all runs them
// with their defaults (what `make bench` runs: about a minute on a quiet machine, under three):
//   --bound     bound to running with the workspace cached: each job's Scheduled and Running events
//               as an admin watch delivers them, `true` jobs one at a time on one uploaded workspace
//   --logs      one job printing 100,000 lines: lines/s until the last is readable from the server,
//               every line checked once and in order; and the follow latency of a job printing a
//               time-stamped line every 100 ms
//   --many      100 concurrent jobs on one agent, each printing 2,000 lines over ~5 s: every log
//               complete and in order, total lines/s and wall time
//   --overhead  the agent's CPU and memory idle and under --many's load (--many runs with it), and
//               its shims' count and memory
// Each mode starts the real `cnlab server` (bench/server_cluster.h) and one real `cnlab agent`
// (simulated h100x8, jobs run as this process's user, in cgroups and namespaces where the machine
// allows them) on fresh data directories under $TMPDIR. The bench's clients share the machine's
// cores with both.
#include <dirent.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "agent/files/files.h"
#include "report.h"
#include "server_cluster.h"

namespace cnlab::bench {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::vector<std::string> kEnded = {"Succeeded", "Failed", "Cancelled"};

int fail(const std::string& mode, const Error& error) {
  std::fprintf(stderr, "agent_bench %s: %s\n", mode.c_str(), error.to_string().c_str());
  return 1;
}

double wall_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---------------------------------------------------------------------------------------------
// The agent, the cluster, and what the bench reads from them.

// Extra flags for every `cnlab agent` started (--agent-arg, for experiments such as --no-cgroups).
std::vector<std::string>& agent_args() {
  static std::vector<std::string> args;
  return args;
}

// `cnlab agent` in a child process, started as tests/e2e/agent_process.h starts it (simulated
// GPUs, its own data directory, metrics on a free loopback port, 1 s heartbeats and stop grace),
// with its log (stderr) in DATA_DIR.log. It stops its jobs when it stops (--stop-jobs-on-exit), so
// a bench that fails half-way leaves no job running.
class AgentProcess {
 public:
  static Result<std::unique_ptr<AgentProcess>> start(const ServerProcess& server, const std::string& join_token,
                                                     const std::string& data_dir, const std::string& name,
                                                     const std::string& gpus) {
    std::unique_ptr<AgentProcess> agent(new AgentProcess());
    agent->data_dir_ = data_dir;
    agent->name_ = name;
    // clang-format off
    std::vector<std::string> args = {CNLAB_BINARY, "agent",
                                     "--server", server.url(), "--ca", server.ca(), "--join-token", join_token,
                                     "--data-dir", data_dir, "--name", name, "--simulate-gpus", gpus,
                                     "--metrics-listen", "127.0.0.1:0", "--heartbeat-interval", "1s",
                                     "--stop-grace", "1s", "--stop-jobs-on-exit"};
    // clang-format on
    args.insert(args.end(), agent_args().begin(), agent_args().end());
    std::string log = agent->log_path();
    auto [pid, line] = spawn_first_line(args, log);
    agent->pid_ = pid;
    if (line.rfind("agent ", 0) != 0) {
      agent->stop();
      return Error::internal("cnlab agent did not start: \"" + line + "\"; its log: " + read_whole(log));
    }
    return agent;
  }
  ~AgentProcess() { stop(); }
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  const std::string& data_dir() const { return data_dir_; }
  std::string log_path() const { return data_dir_ + ".log"; }

  // SIGTERM (the agent stops its jobs, then exits), then SIGKILL after 20 s. Idempotent.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    auto deadline = Clock::now() + 20s;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "agent_bench: the agent did not stop within 20 s of SIGTERM; killing it\n");
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    pid_ = -1;
    remove_node_cgroups();
  }

 private:
  AgentProcess() = default;
  // The agent leaves its node's cgroup (<hierarchy>/cnlab/<node>, empty once its jobs are gone)
  // when it stops; each run has a node name of its own, so the bench removes it. rmdir removes
  // only an empty cgroup.
  void remove_node_cgroups() const {
    std::error_code ec;
    for (const auto& hierarchy : fs::directory_iterator("/sys/fs/cgroup", ec)) {
      ::rmdir((hierarchy.path() / "cnlab" / name_).c_str());
    }
    ::rmdir((fs::path("/sys/fs/cgroup") / "cnlab" / name_).c_str());
  }

  std::string data_dir_, name_;
  pid_t pid_ = -1;
};

// One server and one agent on fresh data directories; the node is Ready.
struct Cluster {
  TempDir dir{"cnlab_agent_bench"};  // first: it outlives the server and the agent
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<net::Client> admin;
  std::unique_ptr<AgentProcess> agent;  // last: stopped before the server
};

Result<std::unique_ptr<Cluster>> start_cluster(const std::string& gpus) {
  auto cluster = std::make_unique<Cluster>();
  // Jobs run as this process's user; as root they pass through the agent's directories.
  ::chmod(cluster->dir.path().c_str(), 0711);
  auto server = ServerProcess::start(cluster->dir.path() + "/server", {});
  if (!server) return server.error();
  cluster->server = std::move(*server);
  auto admin = cluster->server->client(cluster->server->admin_token());
  if (!admin) return admin.error();
  cluster->admin = std::move(*admin);
  auto token = join_token(*cluster->admin);
  if (!token) return token.error();
  auto agent = AgentProcess::start(*cluster->server, *token, cluster->dir.path() + "/agent",
                                   fmt::format("agent-bench-{}", ::getpid()), gpus);
  if (!agent) return agent.error();
  cluster->agent = std::move(*agent);
  auto deadline = Clock::now() + 30s;
  while (true) {
    auto node = call(*cluster->admin, "GET", "/v1/nodes/" + cluster->agent->name(), 200);
    if (node && (*node)["status"].value("phase", "") == "Ready") break;
    if (Clock::now() > deadline) {
      return Error::internal("the agent's node is not Ready after 30 s; the agent's log: " +
                             read_whole(cluster->agent->log_path()));
    }
    std::this_thread::sleep_for(50ms);
  }
  return cluster;
}

// Open streams (watches and followed logs) as the server counts them.
double open_streams(net::Client& admin) {
  auto metrics = scrape(admin);
  return metrics ? metrics->value("cnlab_watch_streams") : -1;
}

// A streamed GET (a watch, a followed log) read line by line in a thread of its own: `on_line` gets
// each line with the steady-clock and wall-clock times its chunk arrived. open() returns once the
// server counts the stream as open.
class LineStream {
 public:
  using OnLine = std::function<void(std::string_view line, int64_t steady_ns, double wall)>;

  static Result<std::unique_ptr<LineStream>> open(const ServerProcess& server, net::Client& admin,
                                                  const std::string& target, OnLine on_line) {
    double before = open_streams(admin);
    auto client = server.client(server.admin_token(), std::chrono::seconds(600));
    if (!client) return client.error();
    std::unique_ptr<LineStream> s(new LineStream());
    s->client_ = std::move(*client);
    s->thread_ = std::thread([self = s.get(), target, on_line = std::move(on_line)] {
      std::string partial;
      auto result = self->client_->stream("GET", target, [&](std::string_view chunk) {
        int64_t steady = now_ns();
        double wall = wall_now();
        partial.append(chunk);
        size_t start = 0, end;
        while ((end = partial.find('\n', start)) != std::string::npos) {
          on_line(std::string_view(partial.data() + start, end - start), steady, wall);
          start = end + 1;
        }
        partial.erase(0, start);
        return true;
      });
      std::lock_guard lock(self->mutex_);
      self->reason_ = result ? "status " + std::to_string(*result) : result.error().to_string();
      self->ended_ = true;
    });
    for (int i = 0; i < 1000; ++i) {
      if (open_streams(admin) >= before + 1) return s;
      if (s->ended_) break;
      std::this_thread::sleep_for(5ms);
    }
    s->close();
    return Error::internal("GET " + target + " did not open: " + s->end_reason());
  }
  ~LineStream() { close(); }
  LineStream(const LineStream&) = delete;
  LineStream& operator=(const LineStream&) = delete;

  void close() {
    closing_ = true;
    client_->interrupt();
    if (thread_.joinable()) thread_.join();
  }
  // Whether the stream ended before close() asked it to (cut off by the server), and how.
  bool ended_early() const { return ended_ && !closing_; }
  std::string end_reason() const {
    std::lock_guard lock(mutex_);
    return reason_;
  }

 private:
  LineStream() = default;
  std::unique_ptr<net::Client> client_;
  std::thread thread_;
  std::atomic<bool> closing_{false}, ended_{false};
  mutable std::mutex mutex_;
  std::string reason_;
};

// When something was seen: the steady clock for intervals, the wall clock to compare with the
// agent's log.
struct Arrival {
  int64_t steady_ns = 0;
  double wall = 0;
};

// A job's phases as the admin's watch delivered them (the first event of each), and the GPU of its
// placement.
struct JobTrace {
  std::map<std::string, Arrival> phases;
  int gpu = -1;
  double at(const std::string& phase) const {  // steady seconds; 0 when never seen
    auto it = phases.find(phase);
    return it == phases.end() ? 0 : static_cast<double>(it->second.steady_ns) / 1e9;
  }
};

// GET /v1/jobs?watch=1 from the current revision, as the admin: every job's phases as they arrive.
class JobWatch {
 public:
  static Result<std::unique_ptr<JobWatch>> open(const ServerProcess& server, net::Client& admin) {
    auto health = call(admin, "GET", "/healthz", 200);
    if (!health) return health.error();
    int64_t revision = (*health)["revision"].get<int64_t>();
    std::unique_ptr<JobWatch> watch(new JobWatch());
    JobWatch* w = watch.get();
    auto stream =
        LineStream::open(server, admin, fmt::format("/v1/jobs?watch=1&revision={}", revision),
                         [w](std::string_view line, int64_t steady, double wall) { w->add(line, steady, wall); });
    if (!stream) return stream.error();
    watch->stream_ = std::move(*stream);
    return watch;
  }
  ~JobWatch() { close(); }

  // Waits until job `id` has been seen in one of `phases`; returns that phase, or "" after `timeout`.
  std::string wait_for(const std::string& id, const std::vector<std::string>& phases,
                       std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    std::string found;
    cv_.wait_for(lock, timeout, [&] {
      auto it = jobs_.find(id);
      if (it == jobs_.end()) return false;
      for (const auto& p : phases) {
        if (it->second.phases.count(p)) {
          found = p;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  JobTrace trace(const std::string& id) const {
    std::lock_guard lock(mutex_);
    auto it = jobs_.find(id);
    return it == jobs_.end() ? JobTrace{} : it->second;
  }
  void close() {
    if (stream_) stream_->close();
  }
  bool ended_early() const { return stream_ && stream_->ended_early(); }

 private:
  JobWatch() = default;
  void add(std::string_view line, int64_t steady, double wall) {
    Json event = Json::parse(line, nullptr, false);
    if (!event.is_object()) return;
    try {
      const Json& object = event.at("object");
      std::string name = object.at("metadata").at("name").get<std::string>();
      const Json& status = object.at("status");
      std::string phase = status.value("phase", "");
      std::lock_guard lock(mutex_);
      JobTrace& trace = jobs_[name];
      if (!trace.phases.count(phase)) trace.phases[phase] = {steady, wall};
      if (phase == "Scheduled" && status.contains("placement") && !status["placement"].empty()) {
        const Json& gpus = status["placement"][0].value("gpus", Json::array());
        if (!gpus.empty()) trace.gpu = gpus[0].value("index", -1);
      }
    } catch (const std::exception&) {
      return;  // not a job event (an ERROR line): nothing to record
    }
    cv_.notify_all();
  }

  std::unique_ptr<LineStream> stream_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<std::string, JobTrace> jobs_;
};

// The "text" of a log line as the API sends it (`{"node","seq","stream","text","time"}`), found
// without parsing the whole line; a text with escapes in it is parsed properly.
std::string log_text(std::string_view line) {
  static constexpr std::string_view kKey = "\"text\":\"";
  size_t at = line.find(kKey);
  if (at == std::string_view::npos) return {};
  size_t begin = at + kKey.size();
  size_t end = line.find('"', begin);
  if (end == std::string_view::npos) return {};
  std::string_view text = line.substr(begin, end - begin);
  if (text.find('\\') == std::string_view::npos) return std::string(text);
  Json json = Json::parse(line, nullptr, false);
  return json.is_object() ? json.value("text", "") : "";
}

// Checks that a log is "line 0", "line 1", ..., each once and in order. A line may end in
// " t=SECONDS" (when the job printed it, time.time()): the last such time is kept.
struct SequenceCheck {
  int64_t received = 0;  // lines
  int64_t next = 0;      // the number expected next
  int64_t repeated = 0, skipped = 0, malformed = 0;
  int64_t first = -1, last = -1;
  double printed_at = 0;
  std::string first_problem;

  void add(std::string_view text) {
    ++received;
    int64_t n = -1;
    if (text.rfind("line ", 0) == 0 && text.size() > 5) {
      std::string_view number = text.substr(5);
      if (size_t space = number.find(' '); space != std::string_view::npos) {
        if (number.substr(space).rfind(" t=", 0) == 0) {
          printed_at = std::strtod(std::string(number.substr(space + 3)).c_str(), nullptr);
        }
        number = number.substr(0, space);
      }
      n = number.empty() ? -1 : 0;
      for (char c : number) {
        if (c < '0' || c > '9') {
          n = -1;
          break;
        }
        n = n * 10 + (c - '0');
      }
    }
    if (n < 0) {
      ++malformed;
      problem(fmt::format("unexpected line \"{}\" after line {}", text.substr(0, 80), next - 1));
      return;
    }
    if (first < 0) first = n;
    last = n;
    if (n == next) {
      ++next;
    } else if (n < next) {
      ++repeated;
      problem(fmt::format("line {} again (or out of order) after line {}", n, next - 1));
    } else {
      skipped += n - next;
      problem(fmt::format("lines {}..{} missing before line {}", next, n - 1, n));
      next = n + 1;
    }
  }
  bool complete(int64_t total) const {
    return received == total && next == total && repeated == 0 && skipped == 0 && malformed == 0;
  }
  std::string summary(int64_t total) const {
    return fmt::format(
        "{} lines, first \"line {}\", last \"line {}\"; {} missing, {} repeated or out of order, {} malformed{}",
        received, first, last, skipped + std::max<int64_t>(0, total - next), repeated, malformed,
        first_problem.empty() ? "" : "; first problem: " + first_problem);
  }

 private:
  void problem(std::string text) {
    if (first_problem.empty()) first_problem = std::move(text);
  }
};

// A job's whole stored log (GET .../logs, up to 100,000 lines), checked as above.
Result<SequenceCheck> check_stored_log(net::Client& admin, const std::string& id) {
  auto response = admin.request("GET", "/v1/jobs/" + id + "/logs");
  if (!response) return response.error();
  if (response->status != 200) return Error::internal("GET logs of " + id + ": " + std::to_string(response->status));
  SequenceCheck check;
  std::string_view body = response->body;
  size_t start = 0, end;
  while ((end = body.find('\n', start)) != std::string_view::npos) {
    check.add(log_text(body.substr(start, end - start)));
    start = end + 1;
  }
  return check;
}

Json job_body(const std::string& gpu, std::vector<std::string> command) {
  return {{"spec", {{"project", "default"}, {"gpu", gpu}, {"command", std::move(command)}}}};
}

Result<std::string> submit(net::Client& admin, const Json& body) {
  auto submitted = call(admin, "POST", "/v1/jobs", 201, body);
  if (!submitted) return submitted.error();
  return (*submitted)["metadata"]["name"].get<std::string>();
}

// What the agent's log says about job `id` besides its routine lines, one line each (at most 10).
std::string agent_log_about(const std::string& log_path, const std::string& id) {
  std::ifstream in(log_path);
  std::string out;
  int n = 0;
  const std::string mention = "job=\"" + id + "\"";
  for (std::string line; std::getline(in, line) && n < 10;) {
    if (line.find(mention) == std::string::npos) continue;
    if (line.find("] job bound ") != std::string::npos || line.find("] job started ") != std::string::npos) continue;
    out += "\n  " + line.substr(0, 400);
    ++n;
  }
  return out.empty() ? "" : "; the agent's log about it:" + out;
}

// Waits for job `id` to end; an error unless it Succeeded, with the job's status and what the
// agent logged about it.
Status wait_succeeded(JobWatch& watch, const Cluster& c, const std::string& id, std::chrono::milliseconds timeout) {
  std::string end = watch.wait_for(id, kEnded, timeout);
  if (end == "Succeeded") return Status::ok();
  auto job = call(*c.admin, "GET", "/v1/jobs/" + id, 200);
  return Error::internal(
      fmt::format("job {} {}: {}{}", id,
                  end.empty() ? fmt::format("did not end within {} s", timeout.count() / 1000) : "ended " + end,
                  job ? (*job)["status"].dump() : job.error().to_string(), agent_log_about(c.agent->log_path(), id)));
}

// When the agent logged `event` ("job bound", "job started") for each job, as seconds since the
// epoch: spdlog's stamp, "[2026-12-01 03:26:01.123] ...", in local time.
std::unordered_map<std::string, double> agent_log_times(const std::string& log_path, const std::string& event) {
  std::unordered_map<std::string, double> times;
  std::ifstream in(log_path);
  const std::string needle = "] " + event + " job=\"";
  for (std::string line; std::getline(in, line);) {
    size_t at = line.find(needle);
    if (at == std::string::npos) continue;
    size_t begin = at + needle.size();
    size_t end = line.find('"', begin);
    std::tm tm{};
    int millis = 0;
    if (end == std::string::npos || std::sscanf(line.c_str(), "[%d-%d-%d %d:%d:%d.%d]", &tm.tm_year, &tm.tm_mon,
                                                &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &millis) != 7) {
      continue;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_isdst = -1;
    times.emplace(line.substr(begin, end - begin), static_cast<double>(std::mktime(&tm)) + millis / 1e3);
  }
  return times;
}

// What the agent's log says about isolation, from its first "job started" line
// ("cgroups=v2 namespaces=true").
std::string isolation_of(const std::string& log_path) {
  std::ifstream in(log_path);
  for (std::string line; std::getline(in, line);) {
    if (line.find("] job started ") == std::string::npos) continue;
    size_t at = line.find("cgroups=");
    return at == std::string::npos ? "" : line.substr(at);
  }
  return "unknown (no job started)";
}

void print_row(const char* what, const Percentiles& p) {
  std::printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f |\n", what, p.n, ms(p.p50), ms(p.p90), ms(p.p99), ms(p.max));
}

// ---------------------------------------------------------------------------------------------
// 1. Bound to running, workspace cached.

struct BoundOptions {
  int jobs = 200;   // measured, after one that warms the cache
  int files = 100;  // in the workspace; 0: the jobs name none
};

struct UploadedWorkspace {
  Json ref;  // {"digest", "size_bytes"} for a job's spec
  int64_t files = 0, content_bytes = 0, archive_bytes = 0;
};

// A workspace of `files` small source files in ten directories, packed as the CLI packs it and
// uploaded once (PUT /v1/workspaces/DIGEST?project=default).
Result<UploadedWorkspace> upload_workspace(Cluster& c, int files) {
  TempDir source("cnlab_agent_bench_workspace");
  for (int i = 0; i < files; ++i) {
    fs::path path = fs::path(source.path()) / fmt::format("pkg{}", i % 10) / fmt::format("module_{}.py", i);
    fs::create_directories(path.parent_path());
    std::ofstream out(path);
    for (int line = 0; line < 24; ++line)
      out << fmt::format("def function_{}_{}(x):\n    return x + {}\n", i, line, line);
  }
  agent::PackOptions options;
  options.output_path = source.path() + ".tgz";
  auto packed = agent::pack_workspace(source.path(), options);
  if (!packed) return packed.error();
  std::string archive = read_whole(packed->archive_path);
  fs::remove(packed->archive_path);
  auto put = c.admin->request("PUT", "/v1/workspaces/" + packed->digest + "?project=default", archive);
  if (!put) return put.error();
  if (put->status != 201) {
    return Error::internal("PUT /v1/workspaces/" + packed->digest + ": " + std::to_string(put->status) + " " +
                           put->body);
  }
  UploadedWorkspace ws;
  ws.ref = {{"digest", packed->digest}, {"size_bytes", static_cast<int64_t>(archive.size())}};
  ws.files = packed->file_count;
  ws.content_bytes = packed->content_bytes;
  ws.archive_bytes = static_cast<int64_t>(archive.size());
  return ws;
}

int bound_to_running(const BoundOptions& o) {
  const std::string mode = "--bound";
  auto cluster = start_cluster("h100x8");
  if (!cluster) return fail(mode, cluster.error());
  Cluster& c = **cluster;
  Result<UploadedWorkspace> ws = UploadedWorkspace{};
  if (o.files > 0) ws = upload_workspace(c, o.files);
  if (!ws) return fail(mode, ws.error());
  auto watch = JobWatch::open(*c.server, *c.admin);
  if (!watch) return fail(mode, watch.error());
  Json body = job_body("h100-5", {"true"});
  if (o.files > 0) body["spec"]["workspace"] = ws->ref;

  struct Sample {
    std::string id;
    int64_t sent = 0;
    JobTrace trace;
  };
  std::vector<Sample> samples;
  double agent_cpu0 = 0, server_cpu0 = 0, own_cpu0 = 0;
  MachineCpu machine0;
  auto started = Clock::now();
  for (int i = 0; i <= o.jobs; ++i) {
    if (i == 1) {  // the first job warmed the cache
      agent_cpu0 = process_cpu_seconds(c.agent->pid());
      server_cpu0 = c.server->cpu_seconds();
      own_cpu0 = own_cpu_seconds();
      machine0 = machine_cpu();
      started = Clock::now();
    }
    int64_t sent = now_ns();
    auto id = submit(*c.admin, body);
    if (!id) return fail(mode, id.error());
    if (auto ok = wait_succeeded(**watch, c, *id, 30s); !ok) return fail(mode, ok.error());
    samples.push_back({*id, sent, (*watch)->trace(*id)});
  }
  double elapsed = seconds_since(started);
  double agent_cpu = process_cpu_seconds(c.agent->pid()) - agent_cpu0;
  double server_cpu = c.server->cpu_seconds() - server_cpu0;
  double own_cpu = own_cpu_seconds() - own_cpu0;
  double others = machine_cpu().busy - machine0.busy - agent_cpu - server_cpu - own_cpu;
  auto bound_log = agent_log_times(c.agent->log_path(), "job bound");
  auto started_log = agent_log_times(c.agent->log_path(), "job started");

  std::vector<double> to_running, to_bound, submit_to_running, running_to_end;
  std::vector<double> seen_to_agent, agent_prepare, started_to_seen;
  for (size_t i = 1; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    double sent = static_cast<double>(s.sent) / 1e9;
    double scheduled = s.trace.at("Scheduled"), running = s.trace.at("Running"), ended = s.trace.at("Succeeded");
    if (scheduled == 0 || running == 0) continue;  // not seen separately (never so far)
    to_running.push_back(running - scheduled);
    to_bound.push_back(scheduled - sent);
    submit_to_running.push_back(running - sent);
    if (ended > 0) running_to_end.push_back(ended - running);
    auto b = bound_log.find(s.id), st = started_log.find(s.id);
    if (b != bound_log.end() && st != started_log.end()) {
      seen_to_agent.push_back(b->second - s.trace.phases.at("Scheduled").wall);
      agent_prepare.push_back(st->second - b->second);
      started_to_seen.push_back(s.trace.phases.at("Running").wall - st->second);
    }
  }
  const JobTrace& cold = samples.front().trace;
  Percentiles r = percentiles(to_running);

  std::printf("\n== 1. bound to running, workspace cached ==\n");
  std::printf(
      "one agent (simulated h100x8, --heartbeat-interval 1s), isolation: %s; %d jobs `true` (h100-5) one at a\n"
      "time, each submitted when the last has Succeeded, all naming one uploaded workspace (%lld files, %lld KiB,\n"
      "%lld KiB gzip tar); one more job first warms the agent's workspace cache and is left out. Times are when\n"
      "an admin watch (GET /v1/jobs?watch=1) delivered each event to the bench (steady clock)\n",
      isolation_of(c.agent->log_path()).c_str(), o.jobs, static_cast<long long>(ws->files),
      static_cast<long long>(ws->content_bytes / 1024), static_cast<long long>(ws->archive_bytes / 1024));
  std::printf("| interval | n | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n");
  print_row("**bound to running** (Scheduled event to Running event)", r);
  print_row("submit to bound (request sent to Scheduled event)", percentiles(to_bound));
  print_row("submit to running (request sent to Running event)", percentiles(submit_to_running));
  print_row("running to Succeeded (a `true` job's end reported)", percentiles(running_to_end));
  std::printf("| first job (cold cache: fetch and unpack), bound to running | 1 | %.1f | | | |\n",
              ms(cold.at("Running") - cold.at("Scheduled")));
  std::printf(
      "\nwhere bound-to-running goes, from the agent's log (millisecond stamps; the bench's wall clock on the\n"
      "same machine):\n");
  std::printf("| part | n | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n");
  print_row("Scheduled event at the bench to the agent's `job bound` (its watch)", percentiles(seen_to_agent));
  print_row("`job bound` to `job started` (job directory, state file, workspace from the cache, shim start)",
            percentiles(agent_prepare));
  print_row("`job started` to Running event at the bench (output opened, PUT status, watch)",
            percentiles(started_to_seen));
  std::printf("%zu jobs in %.1f s (%.0f ms each, end to end); agent CPU %.1f ms per job, server CPU %.1f ms per job\n",
              samples.size() - 1, elapsed, ms(elapsed / static_cast<double>(samples.size() - 1)),
              ms(agent_cpu / static_cast<double>(samples.size() - 1)),
              ms(server_cpu / static_cast<double>(samples.size() - 1)));
  std::printf(
      "CPU over those %.1f s, %% of one core: agent %.0f%%, server %.0f%%, bench %.0f%%, everything else (the jobs, "
      "shims, kernel, other processes) %.0f%%\n",
      elapsed, 100 * agent_cpu / elapsed, 100 * server_cpu / elapsed, 100 * own_cpu / elapsed, 100 * others / elapsed);
  std::printf("goal: bound to running p50 under 50 ms: %s (p50 %.1f ms)\n", r.p50 < 0.050 ? "met" : "NOT met",
              ms(r.p50));
  std::fflush(stdout);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// 2. Log throughput and follow latency.

struct LogsOptions {
  int lines = 100000;
  int follow_lines = 100;  // one every 100 ms
};

int log_throughput(const LogsOptions& o) {
  const std::string mode = "--logs";
  auto cluster = start_cluster("h100x8");
  if (!cluster) return fail(mode, cluster.error());
  Cluster& c = **cluster;
  auto watch = JobWatch::open(*c.server, *c.admin);
  if (!watch) return fail(mode, watch.error());
  int status = 0;

  // As fast as it can: Python's buffered stdout, a write per line.
  std::string program =
      fmt::format("import sys\nw = sys.stdout.write\nfor i in range({}):\n    w('line %d\\n' % i)\n", o.lines);
  double agent_cpu0 = process_cpu_seconds(c.agent->pid()), server_cpu0 = c.server->cpu_seconds();
  double own_cpu0 = own_cpu_seconds();
  MachineCpu machine0 = machine_cpu();
  auto cpu_window_start = Clock::now();
  auto id = submit(*c.admin, job_body("h100-5", {"python3", "-c", program}));
  if (!id) return fail(mode, id.error());
  std::mutex mu;
  std::condition_variable cv;
  SequenceCheck followed;
  int64_t first_ns = 0, last_ns = 0;
  auto follow = LineStream::open(*c.server, *c.admin, "/v1/jobs/" + *id + "/logs?follow=1",
                                 [&](std::string_view line, int64_t steady, double) {
                                   std::string text = log_text(line);
                                   std::lock_guard lock(mu);
                                   followed.add(text);
                                   if (first_ns == 0) first_ns = steady;
                                   last_ns = steady;
                                   if (followed.received >= o.lines) cv.notify_all();
                                 });
  if (!follow) return fail(mode, follow.error());
  if (auto ok = wait_succeeded(**watch, c, *id, 120s); !ok) return fail(mode, ok.error());
  {
    std::unique_lock lock(mu);
    cv.wait_for(lock, 30s, [&] { return followed.received >= o.lines; });
  }
  double agent_cpu = process_cpu_seconds(c.agent->pid()) - agent_cpu0,
         server_cpu = c.server->cpu_seconds() - server_cpu0;
  double own_cpu = own_cpu_seconds() - own_cpu0;
  MachineCpu machine1 = machine_cpu();
  double window_all = seconds_since(cpu_window_start);
  std::this_thread::sleep_for(200ms);  // anything doubled after the last line would show now
  bool cut_off = (*follow)->ended_early();
  std::string cut_reason = (*follow)->end_reason();
  (*follow)->close();
  auto stored = check_stored_log(*c.admin, *id);
  if (!stored) return fail(mode, stored.error());
  JobTrace trace = (*watch)->trace(*id);
  double running = trace.at("Running"), ended = trace.at("Succeeded");
  double first = static_cast<double>(first_ns) / 1e9, last = static_cast<double>(last_ns) / 1e9;
  double window = last - running;
  double busy = machine1.busy - machine0.busy;

  std::printf("\n== 2. log throughput and follow latency ==\n");
  std::printf(
      "one job printing %d lines `line 0`..`line %d` as fast as it can (python3, a buffered write per line);\n"
      "the bench follows GET /v1/jobs/ID/logs?follow=1 from its submission, and reads the stored log again\n"
      "after it ends\n",
      o.lines, o.lines - 1);
  std::printf(
      "| lines | Running event to last line readable | lines/s | Running to first line | first to last line | "
      "last line to Succeeded event |\n|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %d | %.0f ms | **%.0f** | %.0f ms | %.0f ms | %.0f ms |\n", o.lines, ms(window),
              window > 0 ? o.lines / window : 0.0, ms(first - running), ms(last - first), ms(ended - last));
  std::printf(
      "CPU from the submission to the last line readable (%.2f s), %% of one core: agent %.0f%%, server %.0f%%, bench "
      "%.0f%%, "
      "everything else (the job, its shim, the kernel, other processes) %.0f%%\n",
      window_all, 100 * agent_cpu / window_all, 100 * server_cpu / window_all, 100 * own_cpu / window_all,
      100 * (busy - agent_cpu - server_cpu - own_cpu) / window_all);
  bool follow_ok = followed.complete(o.lines), stored_ok = stored->complete(o.lines);
  std::printf("followed stream: %s%s\n", followed.summary(o.lines).c_str(),
              cut_off ? (" (the server cut it off: " + cut_reason + ")").c_str() : "");
  std::printf("stored log:      %s\n", stored->summary(o.lines).c_str());
  std::printf("no line lost or doubled: %s\n", follow_ok && stored_ok ? "checked, none" : "FAILED");
  if (!follow_ok || !stored_ok) status = 1;
  std::fflush(stdout);

  // Follow latency: a line every 100 ms stamped with time.time(); the reader's wall clock at arrival.
  std::string ticker = fmt::format(
      "import time\ntime.sleep(0.5)\nfor i in range({}):\n    print('%d %.6f' % (i, time.time()), flush=True)\n"
      "    time.sleep(0.1)\n",
      o.follow_lines);
  auto tick_id = submit(*c.admin, job_body("h100-5", {"python3", "-c", ticker}));
  if (!tick_id) return fail(mode, tick_id.error());
  std::vector<double> latency;
  int64_t out_of_order = 0, next = 0;
  auto ticks = LineStream::open(*c.server, *c.admin, "/v1/jobs/" + *tick_id + "/logs?follow=1",
                                [&](std::string_view line, int64_t, double wall) {
                                  std::string text = log_text(line);
                                  long long i = -1;
                                  double printed = 0;
                                  if (std::sscanf(text.c_str(), "%lld %lf", &i, &printed) != 2) return;
                                  std::lock_guard lock(mu);
                                  if (i != next) ++out_of_order;
                                  next = i + 1;
                                  latency.push_back(wall - printed);
                                  cv.notify_all();
                                });
  if (!ticks) return fail(mode, ticks.error());
  if (auto ok = wait_succeeded(**watch, c, *tick_id, 120s); !ok) return fail(mode, ok.error());
  {
    std::unique_lock lock(mu);
    cv.wait_for(lock, 10s, [&] { return latency.size() >= static_cast<size_t>(o.follow_lines); });
  }
  (*ticks)->close();
  Percentiles f = percentiles(latency);
  std::printf(
      "\nfollow latency: a job printing `i time.time()` every 100 ms (flushed); the bench follows its log and\n"
      "takes its own wall clock at each line's arrival minus the printed time\n");
  std::printf("| latency | n | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n");
  print_row("print to readable by a follower", f);
  std::printf("lines received %zu of %d, out of order %lld; goal: p99 within 200 ms: %s\n", latency.size(),
              o.follow_lines, static_cast<long long>(out_of_order), f.p99 <= 0.200 ? "met" : "NOT met");
  if (latency.size() != static_cast<size_t>(o.follow_lines) || out_of_order) status = 1;
  std::fflush(stdout);
  return status;
}

// ---------------------------------------------------------------------------------------------
// 3 and 4. Many concurrent jobs; the agent's overhead.

struct ManyOptions {
  int jobs = 100;
  int lines = 2000;
  double seconds = 5;
  std::string slice = "h100-5";
  bool overhead = false;  // measure idle first and print the overhead tables
  double idle_seconds = 10;
};

// The agent's shims (`cnlab agent-shim --job-dir <agent data dir>/jobs/...`) and the processes
// forked from them with the same command line (the init of each job's PID namespace, and the
// short-lived process between).
struct ShimScan {
  int shims = 0, forks = 0;
  int64_t shims_rss_kib = 0, shims_pss_kib = 0, forks_rss_kib = 0, forks_pss_kib = 0;
};

int64_t pss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Pss:", 0) == 0) return std::strtoll(line.c_str() + 4, nullptr, 10);
  }
  return 0;
}

ShimScan scan_shims(const std::string& agent_data_dir) {
  std::map<pid_t, pid_t> parent_of;  // the processes found, and their parents
  if (DIR* proc = ::opendir("/proc")) {
    while (dirent* e = ::readdir(proc)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::string cmdline = read_whole(std::string("/proc/") + e->d_name + "/cmdline");
      if (cmdline.find("agent-shim") == std::string::npos || cmdline.find(agent_data_dir) == std::string::npos)
        continue;
      std::string stat = read_whole(std::string("/proc/") + e->d_name + "/stat");
      auto close = stat.rfind(')');
      if (close == std::string::npos) continue;
      int ppid = 0;
      char state = 0;
      if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
      parent_of[static_cast<pid_t>(std::atoi(e->d_name))] = ppid;
    }
    ::closedir(proc);
  }
  ShimScan scan;
  for (const auto& [pid, ppid] : parent_of) {
    int64_t rss = std::max<int64_t>(0, process_status_field(pid, "VmRSS")), pss = pss_kib(pid);
    if (parent_of.count(ppid)) {
      ++scan.forks;
      scan.forks_rss_kib += rss;
      scan.forks_pss_kib += pss;
    } else {
      ++scan.shims;
      scan.shims_rss_kib += rss;
      scan.shims_pss_kib += pss;
    }
  }
  return scan;
}

// The agent's memory and threads every 250 ms, its shims every second, in a thread.
class Sampler {
 public:
  struct Sample {
    int64_t agent_rss_kib = 0, agent_threads = 0;
    std::optional<ShimScan> shims;
  };
  Sampler(pid_t agent, std::string data_dir) : agent_(agent), data_dir_(std::move(data_dir)) {
    thread_ = std::thread([this] {
      for (int i = 0; !stop_; ++i) {
        Sample s;
        s.agent_rss_kib = process_status_field(agent_, "VmRSS");
        s.agent_threads = process_status_field(agent_, "Threads");
        if (i % 4 == 0) s.shims = scan_shims(data_dir_);
        {
          std::lock_guard lock(mutex_);
          samples_.push_back(s);
        }
        std::unique_lock lock(mutex_);
        cv_.wait_for(lock, 250ms, [&] { return stop_.load(); });
      }
    });
  }
  ~Sampler() { stop(); }
  std::vector<Sample> stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return samples_;
  }

 private:
  pid_t agent_;
  std::string data_dir_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Sample> samples_;
  std::thread thread_;
};

// A window of the agent's life: its CPU over it, its memory and its shims through it.
struct Window {
  double seconds = 0, agent_cpu = 0, server_cpu = 0, own_cpu = 0, machine_busy = 0;
  std::vector<Sampler::Sample> samples;
};

struct WindowStart {
  double agent_cpu, server_cpu, own_cpu;
  MachineCpu machine;
  Clock::time_point at;
};
WindowStart window_start(const Cluster& c) {
  return {process_cpu_seconds(c.agent->pid()), c.server->cpu_seconds(), own_cpu_seconds(), machine_cpu(), Clock::now()};
}
Window window_end(const Cluster& c, const WindowStart& s, std::vector<Sampler::Sample> samples) {
  Window w;
  w.seconds = seconds_since(s.at);
  w.agent_cpu = process_cpu_seconds(c.agent->pid()) - s.agent_cpu;
  w.server_cpu = c.server->cpu_seconds() - s.server_cpu;
  w.own_cpu = own_cpu_seconds() - s.own_cpu;
  w.machine_busy = machine_cpu().busy - s.machine.busy;
  w.samples = std::move(samples);
  return w;
}

void print_overhead(const Window& idle, const Window& load, int jobs) {
  auto mib = [](int64_t kib) { return static_cast<double>(kib) / 1024; };
  std::printf("\n== 4. the agent's overhead ==\n");
  std::printf(
      "the agent process (`cnlab agent`, /proc/PID/stat utime+stime over the window; VmRSS and Threads\n"
      "from /proc/PID/status every 250 ms); CPU as %% of one core\n");
  std::printf(
      "| window | seconds | agent CPU | agent RSS MiB: first / max / last | agent threads max | server CPU | "
      "bench CPU | everything else |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& [name, w] : {std::pair<std::string, const Window*>{"idle (no job)", &idle},
                                {fmt::format("{} jobs of mode 3, first submission to last end", jobs), &load}}) {
    if (w->samples.empty()) continue;
    int64_t rss_max = 0, threads_max = 0;
    for (const auto& s : w->samples) {
      rss_max = std::max(rss_max, s.agent_rss_kib);
      threads_max = std::max(threads_max, s.agent_threads);
    }
    std::printf("| %s | %.1f | %.1f%% | %.1f / %.1f / %.1f | %lld | %.0f%% | %.0f%% | %.0f%% |\n", name.c_str(),
                w->seconds, 100 * w->agent_cpu / w->seconds, mib(w->samples.front().agent_rss_kib), mib(rss_max),
                mib(w->samples.back().agent_rss_kib), static_cast<long long>(threads_max),
                100 * w->server_cpu / w->seconds, 100 * w->own_cpu / w->seconds,
                100 * (w->machine_busy - w->agent_cpu - w->server_cpu - w->own_cpu) / w->seconds);
  }
  std::printf("agent CPU per job under load: %.1f ms\n", jobs ? ms(load.agent_cpu / jobs) : 0.0);
  // The shims: the sample with the most of them.
  ShimScan most;
  int scans = 0;
  for (const auto& s : load.samples) {
    if (!s.shims) continue;
    ++scans;
    if (s.shims->shims > most.shims || (s.shims->shims == most.shims && s.shims->shims_rss_kib > most.shims_rss_kib)) {
      most = *s.shims;
    }
  }
  int idle_shims = 0;
  for (const auto& s : idle.samples) {
    if (s.shims) idle_shims = std::max(idle_shims, s.shims->shims);
  }
  std::printf(
      "\nshims (`cnlab agent-shim`, one per job, its own session) and their forks with the same command line\n"
      "(the init of each job's PID namespace), scanned from /proc every second (%d scans under load; %d shims\n"
      "idle); RSS counts the pages forks share with their shim in each, PSS divides them:\n",
      scans, idle_shims);
  std::printf(
      "| at the most shims | count | RSS MiB total | RSS per process MiB | PSS MiB total | PSS per process MiB |\n"
      "|---|---:|---:|---:|---:|---:|\n");
  auto per = [&](int64_t kib, int n) { return n ? mib(kib) / n : 0.0; };
  std::printf("| shims | %d | %.1f | %.2f | %.1f | %.2f |\n", most.shims, mib(most.shims_rss_kib),
              per(most.shims_rss_kib, most.shims), mib(most.shims_pss_kib), per(most.shims_pss_kib, most.shims));
  std::printf("| forks of the shims (namespace inits) | %d | %.1f | %.2f | %.1f | %.2f |\n", most.forks,
              mib(most.forks_rss_kib), per(most.forks_rss_kib, most.forks), mib(most.forks_pss_kib),
              per(most.forks_pss_kib, most.forks));
  std::fflush(stdout);
}

int many_jobs(const ManyOptions& o) {
  const std::string mode = o.overhead ? "--many/--overhead" : "--many";
  auto cluster = start_cluster("h100x8");
  if (!cluster) return fail(mode, cluster.error());
  Cluster& c = **cluster;
  auto watch = JobWatch::open(*c.server, *c.admin);
  if (!watch) return fail(mode, watch.error());

  Window idle;
  if (o.overhead) {
    std::this_thread::sleep_for(2s);  // registration and the first heartbeats are over
    WindowStart s = window_start(c);
    Sampler sampler(c.agent->pid(), c.agent->data_dir());
    std::this_thread::sleep_for(std::chrono::duration<double>(o.idle_seconds));
    idle = window_end(c, s, sampler.stop());
  }

  int batches = std::max(1, static_cast<int>(o.seconds * 10));
  // The last line carries the time it was printed, to tell the job's own run time from the rest.
  std::string program = fmt::format(
      "import sys, time\nfor b in range({0}):\n"
      "    lines = ['line %d' % i for i in range(b * {1} // {0}, (b + 1) * {1} // {0})]\n"
      "    if b == {0} - 1:\n        lines[-1] += ' t=%.6f' % time.time()\n"
      "    sys.stdout.write('\\n'.join(lines) + '\\n')\n    sys.stdout.flush()\n"
      "    if b < {0} - 1:\n        time.sleep(0.1)\n",
      batches, o.lines);
  Json body = job_body(o.slice, {"python3", "-c", program});
  WindowStart load_start = window_start(c);
  int64_t first_submit = now_ns();
  std::vector<std::string> ids;
  Sampler sampler(c.agent->pid(), c.agent->data_dir());
  for (int i = 0; i < o.jobs; ++i) {
    auto id = submit(*c.admin, body);
    if (!id) return fail(mode, id.error());
    ids.push_back(*id);
  }
  double submitted = static_cast<double>(now_ns() - first_submit) / 1e9;
  auto deadline = Clock::now() + 120s;
  for (const auto& id : ids) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (auto ok = wait_succeeded(**watch, c, id, std::max(left, 1ms)); !ok) return fail(mode, ok.error());
  }
  Window load = window_end(c, load_start, sampler.stop());

  // Every log complete and in order.
  int incomplete = 0;
  std::string first_incomplete;
  int64_t lines = 0;
  std::unordered_map<std::string, double> printed_last;  // job -> when it printed its last line
  for (const auto& id : ids) {
    auto check = check_stored_log(*c.admin, id);
    if (!check) return fail(mode, check.error());
    lines += check->received;
    printed_last[id] = check->printed_at;
    if (!check->complete(o.lines)) {
      ++incomplete;
      if (first_incomplete.empty()) first_incomplete = id + ": " + check->summary(o.lines);
    }
  }
  // Concurrency, from the watch: Running +1, end -1.
  std::vector<std::pair<double, int>> steps;
  std::vector<double> to_running, run_time, own_time, end_lag;
  std::map<int, int> per_gpu;
  double t0 = static_cast<double>(first_submit) / 1e9, last_running = 0, first_running = 1e18, last_end = 0;
  for (const auto& id : ids) {
    JobTrace t = (*watch)->trace(id);
    double running = t.at("Running"), end = t.at("Succeeded");
    steps.emplace_back(running, 1);
    steps.emplace_back(end, -1);
    ++per_gpu[t.gpu];
    to_running.push_back(running - t.at("Scheduled"));
    run_time.push_back(end - running);
    if (printed_last[id] > 0 && t.phases.count("Running") && t.phases.count("Succeeded")) {
      own_time.push_back(printed_last[id] - t.phases.at("Running").wall);
      end_lag.push_back(t.phases.at("Succeeded").wall - printed_last[id]);
    }
    first_running = std::min(first_running, running);
    last_running = std::max(last_running, running);
    last_end = std::max(last_end, end);
  }
  std::sort(steps.begin(), steps.end());
  int now = 0, most = 0;
  for (const auto& [t, d] : steps) most = std::max(most, now += d);
  int per_gpu_max = 0;
  for (const auto& [gpu, n] : per_gpu) per_gpu_max = std::max(per_gpu_max, n);
  double wall = last_end - t0;

  std::printf("\n== 3. %d concurrent jobs on one agent ==\n", o.jobs);
  std::printf(
      "one agent (simulated h100x8), isolation: %s; %d jobs (%s) submitted back to back in %.2f s, each\n"
      "python3 printing %d lines `line 0`..`line %d` in %d flushed batches 100 ms apart (~%.0f s); every job's\n"
      "stored log read back after the end and checked line by line\n",
      isolation_of(c.agent->log_path()).c_str(), o.jobs, o.slice.c_str(), submitted, o.lines, o.lines - 1, batches,
      o.seconds);
  std::printf(
      "| jobs | placed on GPUs (most on one) | most running at once | first submit to: first Running | last Running "
      "| last Succeeded (wall) | lines | lines/s over the wall time |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %d | %zu (%d) | %d | %.2f s | %.2f s | **%.2f s** | %lld | **%.0f** |\n", o.jobs, per_gpu.size(),
              per_gpu_max, most, first_running - t0, last_running - t0, wall, static_cast<long long>(lines),
              wall > 0 ? static_cast<double>(lines) / wall : 0.0);
  std::printf("| per job | n | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|\n");
  print_row("bound to running (Scheduled to Running event)", percentiles(to_running));
  print_row(fmt::format("Running to Succeeded (the job prints for ~{:.0f} s)", o.seconds).c_str(),
            percentiles(run_time));
  print_row("of which: Running event to the job printing its last line", percentiles(own_time));
  print_row("of which: the job printing its last line to the Succeeded event", percentiles(end_lag));
  std::printf("logs complete and in order: %d of %d%s\n", o.jobs - incomplete, o.jobs,
              first_incomplete.empty() ? "" : ("; first incomplete: " + first_incomplete).c_str());
  std::printf(
      "CPU over the wall time, %% of one core: agent %.0f%%, server %.0f%%, bench %.0f%%, everything else (jobs, "
      "shims, kernel, others) %.0f%%\n",
      100 * load.agent_cpu / load.seconds, 100 * load.server_cpu / load.seconds, 100 * load.own_cpu / load.seconds,
      100 * (load.machine_busy - load.agent_cpu - load.server_cpu - load.own_cpu) / load.seconds);
  std::fflush(stdout);
  if (o.overhead) print_overhead(idle, load, o.jobs);
  return incomplete > 0 ? 1 : 0;
}

}  // namespace
}  // namespace cnlab::bench

int main(int argc, char** argv) {
  using namespace cnlab::bench;
  CLI::App app{"CNLab node agent benchmarks (docs/benchmarks/agent.md)"};
  bool all = false, bound = false, logs = false, many = false, overhead = false;
  BoundOptions bo;
  LogsOptions lo;
  ManyOptions mo;
  app.add_flag("--all", all, "Run the four benchmarks with their defaults (--many and --overhead share one run)");
  app.add_flag("--bound", bound, "1. Bound to running with the workspace cached");
  app.add_flag("--logs", logs, "2. One job's log throughput (no line lost) and follow latency");
  app.add_flag("--many", many, "3. Concurrent jobs on one agent, every log complete");
  app.add_flag("--overhead", overhead, "4. The agent's CPU and memory idle and under --many's load");
  app.add_option("--bound-jobs", bo.jobs, "--bound: jobs measured (one more warms the cache)")->capture_default_str();
  app.add_option("--workspace-files", bo.files, "--bound: files in the workspace (0: no workspace)")
      ->capture_default_str();
  app.add_option("--log-lines", lo.lines, "--logs: lines the job prints")->capture_default_str();
  app.add_option("--follow-lines", lo.follow_lines, "--logs: lines of the follow-latency job, 100 ms apart")
      ->capture_default_str();
  app.add_option("--many-jobs", mo.jobs, "--many: concurrent jobs")->capture_default_str();
  app.add_option("--many-lines", mo.lines, "--many: lines each job prints")->capture_default_str();
  app.add_option("--many-seconds", mo.seconds, "--many: how long each job prints")->capture_default_str();
  app.add_option("--many-slice", mo.slice, "--many: each job's GPU request")->capture_default_str();
  app.add_option("--idle-seconds", mo.idle_seconds, "--overhead: the idle window")->capture_default_str();
  app.add_option("--agent-arg", agent_args(),
                 "A flag for every `cnlab agent` started (repeat; e.g. --agent-arg=--no-namespaces)");
  CLI11_PARSE(app, argc, argv);
  if (!(all || bound || logs || many || overhead)) {
    std::fprintf(stderr, "agent_bench: choose --all or one or more of --bound --logs --many --overhead (see --help)\n");
    return 2;
  }
  mo.overhead = all || overhead;
  print_machine_line();
  if (!agent_args().empty()) {
    std::string joined;
    for (const auto& a : agent_args()) joined += " " + a;
    std::printf("cnlab agent started with:%s\n", joined.c_str());
  }
  auto started = Clock::now();
  int status = 0;
  if (all || bound) status |= bound_to_running(bo);
  if (all || logs) status |= log_throughput(lo);
  if (all || many || overhead) status |= many_jobs(mo);
  std::printf("\nagent_bench: %.0f s in all\n", seconds_since(started));
  return status;
}
