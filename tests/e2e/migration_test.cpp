// Transparent checkpoints and live migration end to end: a real server and two real agents (two
// nodes with their own data directories) on this machine, CRIU underneath, and a Python job that
// holds state in memory (a counter it prints every 100 ms), an open file it appends to and a
// child process. Its printed sequence must continue without a gap or a repeat, its file intact,
// across a pre-emption, a live migration and a target that dies mid-migration; a node that dies
// resumes it from its periodic checkpoint; a corrupted checkpoint is refused.
// Needs root and a working CRIU (scripts/install-criu.sh; CI has both); skips with why otherwise.
#include <gmock/gmock.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>

#include "agent/runtime/runtime.h"
#include "vgpu/region.h"
#include "../fakes/held_criu.h"
#include "agent_cluster.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

// argv[1]: how many ticks (0: forever). At the end it writes its result where its environment
// said at the start (after a move, the paths a node other than this one gave it), then checks its
// own file and says so.
constexpr const char* kCounter = R"(
import os, subprocess, sys, time
artifacts = os.environ['CNLAB_ARTIFACTS_DIR']
out = open('counter.txt', 'a')
child = subprocess.Popen([sys.executable, '-c', 'import time\nwhile True: time.sleep(0.05)'])
limit = int(sys.argv[1])
i = 0
while limit == 0 or i < limit:
    print(f'tick {i} pid {os.getpid()} child {child.pid} alive {child.poll() is None}', flush=True)
    out.write(f'{i}\n')
    out.flush()
    i += 1
    time.sleep(0.1)
child.kill()
open(os.path.join(artifacts, 'result.txt'), 'w').write(f'{i} ticks\n')
numbers = open(os.path.join(os.getcwd(), 'counter.txt')).read().split()
ok = numbers == [str(n) for n in range(len(numbers))]
print('file', 'ok' if ok else 'BAD', len(numbers), flush=True)
)";

struct Tick {
  int n;
  std::string pid, child, alive;
};

std::vector<Tick> ticks(const std::vector<std::string>& lines) {
  static const std::regex pattern(R"(tick (\d+) pid (\d+) child (\d+) alive (\w+))");
  std::vector<Tick> out;
  for (const auto& line : lines) {
    std::smatch m;
    if (std::regex_match(line, m, pattern)) out.push_back({std::stoi(m[1]), m[2], m[3], m[4]});
  }
  return out;
}

// Every tick once, in order, from 0; the same process and child throughout, alive.
size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

void expect_unbroken(const std::vector<Tick>& seen, int at_least) {
  std::string numbers;
  for (const auto& t : seen) numbers += std::to_string(t.n) + " ";
  ASSERT_GE(static_cast<int>(seen.size()), at_least) << "ticks: " << numbers;
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].n, static_cast<int>(i)) << "tick " << i << " is " << seen[i].n;
    EXPECT_EQ(seen[i].pid, seen[0].pid);
    EXPECT_EQ(seen[i].child, seen[0].child);
    EXPECT_EQ(seen[i].alive, "True");
  }
}

class MigrationTest : public AgentCluster {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "CRIU dumps and restores other processes only as root (ptrace, namespaces, cgroups); CI runs as root, so these run there";
    // make deps installs it (scripts/install-criu.sh): its absence is a missing install step.
    ASSERT_FALSE(agent::find_criu().empty()) << "no criu: run make deps (scripts/install-criu.sh builds it)";
    // Jobs run as root: CRIU dumps another user's process only with CAP_SYS_RESOURCE, which this
    // VM's root lacks (RunAsAnotherUserWithoutTheCapabilityFallsBack covers that case).
    run_as_ = "";
    start_cluster({"--not-ready-after", "2s", "--lost-after", "4s", "--migration-timeout", migration_timeout(),
                   "--checkpoint-every", "none"});
  }
  // Short, so that the tests of a migration given up end soon.
  virtual std::string migration_timeout() const { return "4s"; }

  // A CPU-only checkpointable job: what CRIU moves (GPU memory would need cuda-checkpoint).
  std::string submit_counter(int ticks, const std::string& priority = "opportunistic", int64_t cpu_milli = 1000) {
    Json body = job_body("default", "none", {"python3", "-u", "-c", kCounter, std::to_string(ticks)});
    body["spec"]["memory_mib"] = 256;
    body["spec"]["cpu_milli"] = cpu_milli;
    body["spec"]["priority_class"] = priority;
    body["spec"]["checkpointable"] = true;
    return call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  }
  int last_tick(const std::string& id) {
    auto seen = ticks(texts(logs(id)));
    return seen.empty() ? -1 : seen.back().n;
  }
  // Whether a line of the job's log (its output and the agent's notes) holds `text`.
  bool log_has(const std::string& id, const std::string& text) {
    const auto lines = texts(logs(id));
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
  }
  bool has_event(const std::string& id, const std::string& type) {
    const Json job = get_job(*admin_, id);
    for (const auto& e : job["status"]["events"]) {
      if (e["type"] == type) return true;
    }
    return false;
  }
  std::string events(const std::string& id) { return get_job(*admin_, id)["status"]["events"].dump(); }
  // The Migrated event's text, kept in the test's XML report (--gtest_output=xml) as the pause
  // measured end to end (docs/benchmarks/migration.md).
  void record_pause(const std::string& id) {
    const Json job = get_job(*admin_, id);
    for (const auto& e : job["status"]["events"]) {
      if (e["type"] == "Migrated") RecordProperty("migrated", e.value("reason", ""));
    }
  }
  // `cnlab ARGS` as the admin: its exit code and stdout.
  std::pair<int, std::string> cnlab(const std::string& args) {
    const std::string command = "CNLAB_SERVER='" + server_->url() + "' CNLAB_CA='" + server_->ca() + "' CNLAB_TOKEN='" +
                                server_->admin_token() + "' " + CNLAB_BINARY + " " + args + " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    std::string out;
    char buffer[4096];
    while (pipe && std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
    const int status = pipe ? ::pclose(pipe) : -1;
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  }
  // Its processes stop before the test's agents do (an agent stopped with SIGTERM leaves its jobs
  // running, to be adopted by the next one).
  void cancel_and_wait(const std::string& id) {
    call(*admin_, "POST", "/v1/jobs/" + id + "/cancel", 200);
    EXPECT_EQ(wait_for_end(id)["status"]["phase"], "Cancelled") << events(id);
  }
  // The node the job is bound to now; "" while it waits.
  std::string placed_on(const std::string& id) {
    const Json placement = get_job(*admin_, id)["status"].value("placement", Json::array());
    return placement.empty() ? "" : placement[0].value("node", "");
  }
  // Node-a dies, its agent and the job's processes with it, after the job ran on past its latest
  // checkpoint; `add_node_b` adds the node it must resume on, from that checkpoint: not from the
  // beginning, and from before node-a died, so the ticks in between are printed again; the same
  // process, carrying on, each tick once.
  void kill_node_a_and_resume_on_node_b(const std::string& id, const std::function<void()>& add_node_b) {
    agents_[0]->stop(SIGKILL);
    kill_job_processes(id);
    const auto at_death = ticks(texts(logs(id)));  // all node-a ever shipped
    add_node_b();
    ASSERT_TRUE(eventually([&] { return placed_on(id) == "node-b" && get_job(*admin_, id)["status"]["phase"] == "Running"; }, 30s))
        << events(id);
    ASSERT_TRUE(eventually([&] { return ticks(texts(logs(id))).size() >= at_death.size() + 5; }, 20s)) << agents_[1]->log();
    const auto all = ticks(texts(logs(id)));
    const Tick& resumed = all[at_death.size()];
    EXPECT_GT(resumed.n, 0) << "resumed from the checkpoint, not from the beginning";
    EXPECT_LE(resumed.n, at_death.back().n - 3);
    EXPECT_EQ(resumed.pid, all.front().pid);
    for (size_t i = at_death.size() + 1; i < all.size(); ++i) EXPECT_EQ(all[i].n, all[i - 1].n + 1);
    EXPECT_THAT(events(id), HasSubstr("processes restored (dumped on node-a)"));
  }
  // What a dead node's job would be: gone (every copy of it on this machine; tests running beside
  // this one keep theirs).
  static void kill_job_processes(const std::string& id) { signal_job_processes(id, nullptr, SIGKILL); }
  // The pids of the live processes (not zombies) for which `match` (given /proc/PID) holds.
  static std::vector<pid_t> processes_where(const std::function<bool(const fs::path&)>& match) {
    std::vector<pid_t> found;
    std::error_code ec;
    for (auto it = fs::directory_iterator("/proc", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const std::string pid = it->path().filename();
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      if (read_proc_file(it->path() / "stat").find(") Z ") != std::string::npos) continue;
      if (match(it->path())) found.push_back(std::stoi(pid));
    }
    return found;
  }
  // Whether the process at `proc` belongs to the job's copy on `node` (any node's for nullptr):
  // it is in the job's cgroup there, <parent>/<node>/<job>, with the namespace's init. Not told by
  // its environment: a restored process keeps the one of the node it was dumped on, so the
  // target's copy would pass for the source's.
  static bool job_process(const fs::path& proc, const std::string& id, const AgentProcess* node) {
    const std::string cgroup = (node ? "/" + node->name() : std::string()) + "/" + agent::cgroup_name_for(id) + "\n";
    return read_proc_file(proc / "cgroup").find(cgroup) != std::string::npos;
  }
  static std::string command_line(const fs::path& proc) {
    std::string cmdline = read_proc_file(proc / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    return cmdline;
  }
  // Sends `sig` to the job's processes in its copy on `node` (any node's for nullptr), and to its
  // shim there.
  static void signal_job_processes(const std::string& id, const AgentProcess* node, int sig) {
    const std::string shim_dir = node ? node->data_dir() + "/jobs/" + id + "/" : std::string();
    for (pid_t pid : processes_where([&](const fs::path& proc) {
           const std::string cmdline = command_line(proc);
           const bool shim = node && cmdline.find("cnlab-shim") != std::string::npos &&
                             cmdline.find(shim_dir) != std::string::npos;
           return shim || job_process(proc, id, node);
         })) {
      ::kill(pid, sig);
    }
  }
  // The job's processes of its copy on `node` that are still there: "pid state command" a line.
  static std::string left_processes(const std::string& id, const AgentProcess& node) {
    std::string text;
    for (pid_t pid : processes_where([&](const fs::path& proc) { return job_process(proc, id, &node); })) {
      const fs::path proc = "/proc/" + std::to_string(pid);
      const std::string status = read_proc_file(proc / "status");
      const size_t state = status.find("State:");
      text += std::to_string(pid) + " " + status.substr(state, status.find('\n', state) - state) + " " +
              command_line(proc) + "\n";
    }
    return text;
  }
  // How many processes of the job's copy on `node` are alive.
  static size_t job_processes_on(const std::string& id, const AgentProcess& node) {
    return processes_where([&](const fs::path& proc) { return job_process(proc, id, &node); }).size();
  }
  // A CRIU that holds one of its commands on demand (tests/fakes/held_criu.h), for an agent's --criu.
  std::string held_criu() const {
    fs::create_directories(held_criu_dir());
    return test_fakes::write_held_criu(held_criu_dir(), agent::find_criu());
  }
  fs::path held_criu_dir() const { return nodes_.path() + "/held-criu"; }
  // Signals (kills) every CRIU whose command line names `path`.
  static void kill_criu_under(const std::string& path) { signal_criu_under(path, SIGKILL); }
  static void signal_criu_under(const std::string& path, int sig) {
    for (pid_t pid : processes_where([&](const fs::path& proc) {
           const std::string cmdline = command_line(proc);
           return cmdline.find("criu ") != std::string::npos && cmdline.find(path) != std::string::npos;
         })) {
      ::kill(pid, sig);
    }
  }
};

TEST_F(MigrationTest, ALiveMigratedJobCarriesOnOnTheOtherNodeWithoutAGapOrARepeat) {
  add_agent("node-a", "h100");
  std::string id = submit_counter(60);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 10; }, 20s)) << agents_[0]->log();
  add_agent("node-b", "h100");

  // As a user does it: `cnlab migrate` waits for the outcome and says it.
  auto [code, said] = cnlab("migrate " + id + " --to node-b --timeout 60");
  EXPECT_EQ(code, 0) << said;
  EXPECT_THAT(said, HasSubstr("migration of job " + id + " to node-b requested"));
  EXPECT_THAT(said, HasSubstr("migrated from node-a to node-b; paused"));
  ASSERT_TRUE(has_event(id, "Migrated")) << events(id) << agents_[0]->log() << agents_[1]->log();
  EXPECT_EQ(placed_on(id), "node-b");
  EXPECT_THAT(events(id), HasSubstr("migrated from node-a to node-b; paused"));
  record_pause(id);
  // The dump went from agent to agent (mutual TLS, node certificates), not through the server.
  EXPECT_THAT(agents_[1]->log(), HasSubstr("migration dump received job=\"" + id + "\" from=\"node-a\""));
  EXPECT_FALSE(get_job(*admin_, id)["status"].contains("checkpoint")) << get_job(*admin_, id).dump();

  Json ended = wait_for_end(id, 60s);
  ASSERT_EQ(ended["status"]["phase"], "Succeeded") << ended.dump() << agents_[1]->log();
  const auto lines = texts(logs(id));
  expect_unbroken(ticks(lines), 60);
  EXPECT_EQ(lines.back(), "file ok 60") << "the file it kept open on node-a was appended to on node-b";
  EXPECT_THAT(agents_[1]->log(), HasSubstr("job started job=\"" + id + "\""));
  // The paths node-a gave it (its environment, its working directory) hold on node-b, whose data
  // directory is elsewhere: the result it wrote there by name is among its artifacts.
  auto result = admin_->request("GET", "/v1/jobs/" + id + "/artifacts/result.txt");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200) << result->body;
  EXPECT_EQ(result->body, "60 ticks\n");
}

// argv[1]: MiB of memory it fills with random bytes (nothing compresses); argv[2]: ticks. It prints
// the memory's digest at the start and checks it again at the end.
constexpr const char* kMemoryHolder = R"(
import hashlib, os, sys, time
block = os.urandom(1 << 20)
memory = bytearray(block) * int(sys.argv[1])
for offset in range(0, len(memory), 1 << 20):
    memory[offset:offset + 8] = offset.to_bytes(8, 'little')
digest = hashlib.sha256(memory).hexdigest()
print('holding', len(memory) >> 20, 'MiB digest', digest, flush=True)
for i in range(int(sys.argv[2])):
    print(f'tick {i} pid {os.getpid()} child 0 alive True', flush=True)
    time.sleep(0.1)
print('memory', 'ok' if hashlib.sha256(memory).hexdigest() == digest else 'BAD', flush=True)
)";

// A dump of GiBs takes far longer to send and restore than the server's 5 s timeout here: the
// source's word every second that it is still dumping or sending, then the target's that it is
// still restoring (--migration-progress-every), keep it going.
class LargeMigrationTest : public MigrationTest {
 protected:
  std::string migration_timeout() const override { return "5s"; }

  // node-a runs a job holding `mib` MiB and moves it post-copy to node-b (both post-copy agents
  // started here); returns in `id` once the target's restore is done and its pull has begun.
  void start_post_copy_move(int mib, std::string* id) {
    const std::vector<std::string> flags = {"--post-copy", "--address", "127.0.0.1"};
    add_agent("node-a", "h100", flags);
    Json body = job_body("default", "none", {"python3", "-u", "-c", kMemoryHolder, std::to_string(mib), "600"});
    body["spec"]["memory_mib"] = mib + 512;
    body["spec"]["cpu_milli"] = 1000;
    body["spec"]["checkpointable"] = true;
    *id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
    ASSERT_TRUE(eventually([&] { return last_tick(*id) >= 5; }, 120s)) << agents_[0]->log();
    add_agent("node-b", "h100", flags);
    call(*admin_, "POST", "/v1/jobs/" + *id + "/migrate", 202, {{"to", "node-b"}});
    // The target's runtime logs the restore done, and the pull begins: 1 GiB takes seconds
    // (docs/benchmarks/migration.md). (The Migrated event comes later, once the target's agent has
    // reported the job Running: on a loaded machine most pages could have arrived by then.)
    ASSERT_TRUE(eventually([&] { return agents_[1]->log().find(" restore_ms=") != std::string::npos; }, 60s))
        << events(*id) << agents_[1]->log();
  }
};

// More memory than the workspace limits (1 GiB of files, 512 MiB of archive) that used to bound a
// dump: stop-and-copy carries it whole. For the benchmark (scripts/agent-migration-bench.sh,
// docs/benchmarks/migration.md), CNLAB_E2E_MIGRATION_MIB sets the size and
// CNLAB_E2E_MIGRATION_POST_COPY=1 makes both agents move it by post-copy.
TEST_F(LargeMigrationTest, AJobHoldingMoreThanAGibibyteMigratesWithItsMemoryIntact) {
  const char* size_env = std::getenv("CNLAB_E2E_MIGRATION_MIB");
  const int mib = size_env ? std::atoi(size_env) : 1100;
  ASSERT_GT(mib, 0) << "CNLAB_E2E_MIGRATION_MIB=" << size_env;
  const char* post_copy_env = std::getenv("CNLAB_E2E_MIGRATION_POST_COPY");
  const bool post_copy = post_copy_env && std::string(post_copy_env) == "1";
  std::vector<std::string> flags = {"--migration-progress-every", "1s"};
  if (post_copy) flags.insert(flags.end(), {"--post-copy", "--address", "127.0.0.1"});
  add_agent("node-a", "h100", flags);
  Json body = job_body("default", "none", {"python3", "-u", "-c", kMemoryHolder, std::to_string(mib), "150"});
  body["spec"]["memory_mib"] = mib + 512;
  body["spec"]["cpu_milli"] = 1000;
  body["spec"]["priority_class"] = "opportunistic";
  body["spec"]["checkpointable"] = true;
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 120s)) << agents_[0]->log();
  add_agent("node-b", "h100", flags);

  auto [code, said] = cnlab("migrate " + id + " --to node-b --timeout 300");
  EXPECT_EQ(code, 0) << said << agents_[0]->log() << agents_[1]->log();
  if (!post_copy) {  // seconds of packing and sending; a post-copy dump is sent before the first report
    EXPECT_THAT(said, HasSubstr(" MiB to node-b\n")) << "cnlab migrate shows what the source is doing meanwhile";
  }
  ASSERT_TRUE(has_event(id, "Migrated")) << events(id) << agents_[0]->log() << agents_[1]->log();
  EXPECT_EQ(placed_on(id), "node-b");
  // Its agents measure what a dump of it copies and say so: the scheduler prices its moves by that.
  EXPECT_TRUE(eventually([&] { return get_job(*admin_, id)["status"].value("memory_used_mib", 0) >= mib; }, 15s))
      << get_job(*admin_, id)["status"].dump();
  auto [described_code, described] = cnlab("describe " + id);
  EXPECT_EQ(described_code, 0) << described;
  EXPECT_THAT(described, ::testing::ContainsRegex("Host: +1000m CPU, [0-9.]+ [MG]iB memory \\(its processes hold [0-9.]+ [MG]iB\\)"))
      << described;
  record_pause(id);
  Json ended = wait_for_end(id, 300s);
  ASSERT_EQ(ended["status"]["phase"], "Succeeded") << ended.dump() << agents_[1]->log();
  const auto lines = texts(logs(id));
  expect_unbroken(ticks(lines), 150);
  EXPECT_THAT(lines.front(), HasSubstr("holding " + std::to_string(mib) + " MiB"));
  EXPECT_EQ(lines.back(), "memory ok") << "its memory arrived on node-b as it was on node-a";
  // The frozen copy on node-a is stopped (post-copy: once its pages are served, or the target's
  // copy is gone), not left to an agent the test stops.
  EXPECT_TRUE(eventually([&] { return agents_[0]->log().find("job ended job=\"" + id + "\"") != std::string::npos; }, 60s))
      << agents_[0]->log();
}

// The risk post-copy takes: once the job runs on the target, the rest of its memory is only on
// the source. A source that dies mid-pull leaves the job without it; the target kills it (it would
// crash or spin on the first missing page) and it ends saying why (a rollback to the source's copy
// is not built: docs/checkpoint.md).
TEST_F(LargeMigrationTest, APostCopyJobWhoseSourceDiesMidPullIsRequeuedSayingItsMemoryDidNotArrive) {
  std::string id;
  ASSERT_NO_FATAL_FAILURE(start_post_copy_move(1024, &id));
  // The source dies well before the pull of 1 GiB ends.
  agents_[0]->stop(SIGKILL);
  call(*admin_, "POST", "/v1/nodes/node-a/cordon", 200);  // so that the requeued job goes to node-b
  // Its memory was lost with the source, not by its fault: it goes back to the queue (as from a
  // lost node) instead of Failed, and starts again on node-b (no checkpoint was taken).
  ASSERT_TRUE(eventually(
      [&] {
        const std::string seen = events(id);
        return seen.find("its memory did not all arrive") != std::string::npos &&
               seen.find("requeued to start again") != std::string::npos;
      },
      60s))
      << events(id) << agents_[1]->log();
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, id)["status"]["phase"] == "Running"; }, 60s))
      << events(id) << agents_[1]->log();
  EXPECT_EQ(placed_on(id), "node-b");
  // The source's copy, let go by its CRIU (which the dead agent's page gate no longer reaches; it
  // is made sure of here) runs on. Its agent, coming back, finds it running with the migration
  // it had saved, which the requeue ended: it stops the copy at once, without dumping it, and
  // never moves it again (it once sent it to node-b a second time and waited 30 minutes for a pull
  // that never came).
  kill_criu_under(agents_[0]->data_dir());
  signal_job_processes(id, agents_[0].get(), SIGCONT);
  agents_[0]->start();
  EXPECT_TRUE(eventually([&] { return agents_[0]->log().find("job ended job=\"" + id + "\"") != std::string::npos; },
                         20s))
      << agents_[0]->log();
  const std::string source_log = agents_[0]->log();
  EXPECT_EQ(count_of(source_log, "migration dump sent"), 1u) << source_log;
  EXPECT_EQ(count_of(source_log, "job checkpointed job="), 0u) << "a stale copy is never dumped: " << source_log;
  EXPECT_EQ(get_job(*admin_, id)["status"]["phase"], "Running");
  cancel_and_wait(id);
}

// A source agent asked to stop while the target still pulls pages serves them for its stop grace
// more, not for the 30 minutes a pull may take: the pages leave through its own gate, which goes
// with it. Its frozen copy is killed before CRIU lets go of it, so it never runs again.
TEST_F(LargeMigrationTest, ASourceAgentStoppedWhileItServesPagesStopsWithinItsGraceAndItsCopyNeverRuns) {
  std::string id;
  ASSERT_NO_FATAL_FAILURE(start_post_copy_move(512, &id));
  // The target's pulling is held: the source serves on.
  const std::string target_dir = agents_[1]->data_dir();
  signal_criu_under(target_dir, SIGSTOP);
  ASSERT_TRUE(eventually([&] { return agents_[0]->log().find("job migrated away") != std::string::npos; }, 60s))
      << agents_[0]->log();

  const auto asked = std::chrono::steady_clock::now();
  agents_[0]->stop(SIGTERM);
  const auto took = std::chrono::steady_clock::now() - asked;
  EXPECT_LT(took, 20s) << "the stop grace is 1 s; " << agents_[0]->log();
  EXPECT_THAT(agents_[0]->log(), HasSubstr("serving its pages was given up"));
  // Nothing of the source's copy is left running.
  EXPECT_TRUE(eventually([&] { return job_processes_on(id, *agents_[0]) == 0u; }, 10s))
      << agents_[0]->log() << left_processes(id, *agents_[0]);

  // The target's pull, let go, finds the source gone: the job goes back to the queue.
  signal_criu_under(target_dir, SIGCONT);
  EXPECT_TRUE(eventually([&] { return events(id).find("its memory did not all arrive") != std::string::npos; }, 60s))
      << events(id) << agents_[1]->log();
  cancel_and_wait(id);
}

TEST_F(MigrationTest, APreemptedJobIsDumpedAndResumesExactlyWhereItWas) {
  add_agent("node-a", "h100", {"--cpu-milli", "1500"});
  std::string id = submit_counter(50);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
  // A production job needs the node's CPU: the counter is pre-empted, dumped, and resumed after.
  Json urgent_body = job_body("default", "none", {"sleep", "2"});
  urgent_body["spec"]["priority_class"] = "production";
  urgent_body["spec"]["memory_mib"] = 64;
  std::string urgent = call(*admin_, "POST", "/v1/jobs", 201, urgent_body)["metadata"]["name"];
  EXPECT_EQ(wait_for_end(urgent)["status"]["phase"], "Succeeded");
  Json ended = wait_for_end(id, 60s);
  ASSERT_EQ(ended["status"]["phase"], "Succeeded") << ended.dump() << agents_[0]->log();
  EXPECT_TRUE(has_event(id, "Preempted")) << events(id);
  EXPECT_THAT(events(id), HasSubstr("processes restored"));
  EXPECT_EQ(ended["status"]["checkpoint"]["kind"], "process");
  const auto lines = texts(logs(id));
  expect_unbroken(ticks(lines), 50);
  EXPECT_EQ(lines.back(), "file ok 50") << ::testing::PrintToString(lines) << events(id);
}

// Pre-empted off node-a while node-b has room for it: it does not start on node-b until node-a has
// dumped it, stored the checkpoint and released it; then it resumes there from that checkpoint.
// (Started at once, it would have begun again from tick 0 beside the copy being dumped.)
TEST_F(MigrationTest, APreemptedJobResumesOnAnotherNodeFromTheCheckpointTakenAsItStopped) {
  add_agent("node-a", "h100", {"--cpu-milli", "1500"});
  std::string id = submit_counter(60);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
  // Room for the counter (1 core), not for the urgent job (1.4 cores), which must take node-a's.
  add_agent("node-b", "h100", {"--cpu-milli", "1200"});
  // It runs well past the counter's dump and release, so that node-b is where the counter can go.
  Json urgent_body = job_body("default", "none", {"sleep", "5"});
  urgent_body["spec"]["priority_class"] = "production";
  urgent_body["spec"]["cpu_milli"] = 1400;
  urgent_body["spec"]["memory_mib"] = 64;
  std::string urgent = call(*admin_, "POST", "/v1/jobs", 201, urgent_body)["metadata"]["name"];
  Json ended = wait_for_end(id, 90s);
  ASSERT_EQ(ended["status"]["phase"], "Succeeded") << ended.dump() << agents_[0]->log() << agents_[1]->log();
  EXPECT_EQ(wait_for_end(urgent)["status"]["phase"], "Succeeded");
  // One copy throughout: each tick once, from the process restored on node-b.
  const auto lines = texts(logs(id));
  expect_unbroken(ticks(lines), 60);
  EXPECT_EQ(lines.back(), "file ok 60") << ::testing::PrintToString(lines) << events(id);
  // Pre-empted, released by node-a with its checkpoint, and only then bound to node-b.
  std::vector<std::string> order;
  for (const auto& e : ended["status"]["events"]) {
    const std::string type = e["type"];
    if (type == "Preempted" || type == "Released" || type == "Scheduled") order.push_back(type + " " + e.value("reason", ""));
  }
  ASSERT_EQ(order.size(), 4u) << ::testing::PrintToString(order);
  EXPECT_THAT(order[0], HasSubstr("Scheduled bound to node-a"));
  EXPECT_THAT(order[1], HasSubstr("Preempted pre-empted for job " + urgent));
  EXPECT_THAT(order[2], HasSubstr("Released node node-a stopped it and stored its checkpoint; it starts again from its "
                                  "process checkpoint"));
  EXPECT_THAT(order[3], HasSubstr("Scheduled bound to node-b"));
  EXPECT_EQ(ended["status"]["checkpoint"]["kind"], "process");
}

// Post-copy (`cnlab agent --post-copy`): the target runs the job as soon as all but its memory has
// arrived and pulls the memory from the source's page server meanwhile (CRIU lazy pages).
const std::vector<std::string> kPostCopy = {"--post-copy", "--address", "127.0.0.1"};

TEST_F(MigrationTest, APostCopyMigrationRunsTheJobOnTheTargetAndPullsItsMemoryFromTheSource) {
  add_agent("node-a", "h100", kPostCopy);
  std::string id = submit_counter(60);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 10; }, 20s)) << agents_[0]->log();
  // A checkpoint taken before the move stays the job's resume point (the dump is not one).
  call(*admin_, "POST", "/v1/jobs/" + id + "/checkpoint", 202);
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, id)["status"].contains("checkpoint"); }, 20s));
  const std::string checkpoint = get_job(*admin_, id)["status"]["checkpoint"]["digest"];
  const auto [described, description] = cnlab("describe " + id);
  EXPECT_EQ(described, 0) << description;
  EXPECT_THAT(description, HasSubstr("Checkpoint:  process, ")) << "the checkpoint it would resume from";
  EXPECT_THAT(description, HasSubstr(checkpoint.substr(0, 19))) << description;
  add_agent("node-b", "h100", kPostCopy);

  auto [code, said] = cnlab("migrate " + id + " --to node-b --timeout 60");
  EXPECT_EQ(code, 0) << said << agents_[0]->log() << agents_[1]->log();
  ASSERT_TRUE(has_event(id, "Migrated")) << events(id) << agents_[0]->log() << agents_[1]->log();
  EXPECT_THAT(events(id), HasSubstr("migrated from node-a to node-b (post-copy); paused"));
  record_pause(id);
  EXPECT_THAT(agents_[0]->log(), HasSubstr("job checkpointed for post-copy job=\"" + id + "\""));
  EXPECT_EQ(get_job(*admin_, id)["status"]["checkpoint"]["digest"], checkpoint) << get_job(*admin_, id).dump();

  Json ended = wait_for_end(id, 60s);
  ASSERT_EQ(ended["status"]["phase"], "Succeeded") << ended.dump() << agents_[1]->log();
  const auto lines = texts(logs(id));
  expect_unbroken(ticks(lines), 60);
  EXPECT_EQ(lines.back(), "file ok 60");
  EXPECT_TRUE(eventually([&] { return agents_[0]->log().find("job pages served job=\"" + id + "\"") != std::string::npos; }))
      << agents_[0]->log();
  EXPECT_THAT(agents_[1]->log(), HasSubstr("job pages pulled job=\"" + id + "\""));
}

TEST_F(MigrationTest, ANodeCertificateRenewedWhileTheAgentRunsStillCarriesAMigration) {
  const std::vector<std::string> check_often = {"--certificate-check-interval", "1s"};
  add_agent("node-a", "h100", check_often);
  std::string id = submit_counter(40);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
  AgentProcess& target = add_agent("node-b", "h100", check_often);
  // node-b's certificate is gone (as good as expired): it gets a new one and restarts its endpoint.
  fs::remove(target.data_dir() + "/tls/node.pem");
  auto issued = [&] {
    const std::string log = target.log(), line = "node certificate issued node=\"node-b\"";
    return log.find(line) != log.rfind(line);
  };
  ASSERT_TRUE(eventually(issued, 20s)) << target.log();
  ASSERT_TRUE(fs::exists(target.data_dir() + "/tls/node.pem"));

  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", "node-b"}});
  ASSERT_TRUE(eventually([&] { return has_event(id, "Migrated"); }, 30s)) << events(id) << target.log();
  Json ended = wait_for_end(id, 60s);
  ASSERT_EQ(ended["status"]["phase"], "Succeeded") << ended.dump() << target.log();
  expect_unbroken(ticks(texts(logs(id))), 40);
}

TEST_F(MigrationTest, APostCopyMigrationWhoseTargetDiesLeavesTheJobRunningOnTheSource) {
  add_agent("node-a", "h100", kPostCopy);
  add_agent("node-b", "h100", kPostCopy);
  std::string id = submit_counter(0);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s));
  const std::string source = placed_on(id), target = source == "node-a" ? "node-b" : "node-a";
  agents_[source == "node-a" ? 1 : 0]->stop(SIGKILL);
  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", target}});
  ASSERT_TRUE(eventually([&] { return has_event(id, "MigrationFailed"); }, 30s)) << events(id);
  const int at = last_tick(id);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= at + 10; }, 20s))
      << "thawed on the source" << agents_[source == "node-a" ? 0 : 1]->log();
  EXPECT_EQ(placed_on(id), source);
  expect_unbroken(ticks(texts(logs(id))), at + 10);
  cancel_and_wait(id);
}

// A target whose restore outlasts the move (the server timed it out and rolled it back: the job
// carries on on the source) gives the restore up as soon as its agent hears the job left the node
// (or the server refuses its next word of progress), instead of holding CRIU and the source's page
// pull until its checkpoint timeout and then running a second copy of the job. CRIU's restore is
// held there on purpose (tests/fakes/held_criu.h); the target reports progress less often than the
// 4 s timeout.
TEST_F(MigrationTest, ATargetWhoseRestoreOutlastsTheMoveGivesItUpWhenTheServerNoLongerWaits) {
  add_agent("node-a", "h100", kPostCopy);
  std::string id = submit_counter(0);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
  const fs::path criu_dir = held_criu_dir();
  std::vector<std::string> target_flags = kPostCopy;
  target_flags.insert(target_flags.end(), {"--criu", held_criu(), "--migration-progress-every", "6s"});
  test_fakes::hold_criu_command(criu_dir, "restore");
  AgentProcess& target = add_agent("node-b", "h100", target_flags);

  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", "node-b"}});
  ASSERT_TRUE(eventually([&] { return fs::exists(criu_dir / "held"); }, 30s)) << events(id) << target.log();
  ASSERT_TRUE(eventually([&] { return has_event(id, "MigrationFailed"); }, 20s)) << events(id);
  EXPECT_TRUE(eventually([&] { return target.log().find("job restore given up job=\"" + id + "\"") != std::string::npos; },
                         20s))
      << target.log();
  // Not a failed start: the server, which binds the job to node-a again, hears nothing of it.
  EXPECT_TRUE(eventually([&] { return target.log().find("job not restored job=\"" + id + "\": its move was given up") != std::string::npos; }))
      << target.log();
  EXPECT_THAT(target.log(), Not(HasSubstr("job not started job=\"" + id + "\"")));
  // Nothing of it is left on node-b: no CRIU restoring (the held one) or pulling pages, no copy.
  EXPECT_TRUE(eventually(
      [&] {
        return processes_where([&](const fs::path& proc) {
                 const std::string cmdline = command_line(proc);
                 const bool restoring = cmdline.find(" restore ") != std::string::npos ||
                                        cmdline.find(" lazy-pages ") != std::string::npos;
                 return restoring && (cmdline.find(criu_dir.string()) != std::string::npos ||
                                      cmdline.find(target.data_dir()) != std::string::npos);
               }).empty();
      },
      10s))
      << target.log();
  EXPECT_EQ(job_processes_on(id, target), 0u);

  const int at = last_tick(id);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= at + 10; }, 20s)) << "thawed on the source" << agents_[0]->log();
  EXPECT_EQ(placed_on(id), "node-a");
  EXPECT_EQ(get_job(*admin_, id)["status"]["phase"], "Running");
  expect_unbroken(ticks(texts(logs(id))), at + 10);
  cancel_and_wait(id);
}

// A job cancelled while its source dumps it for a move is not sent (a large one would take a
// minute): the source stops it as any cancelled job, and it ends Cancelled without having moved.
// The dump is held on purpose for 6 s (tests/fakes/held_criu.h); the source's progress keeps the
// move alive meanwhile.
TEST_F(MigrationTest, AJobCancelledWhileItIsDumpedForAMoveIsNotSentAndEndsCancelledWhereItRan) {
  const fs::path criu_dir = held_criu_dir();
  AgentProcess& source = add_agent("node-a", "h100", {"--criu", held_criu(), "--migration-progress-every", "1s"});
  std::string id = submit_counter(0);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << source.log();
  add_agent("node-b", "h100");
  test_fakes::hold_criu_command(criu_dir, "dump", 6);

  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", "node-b"}});
  ASSERT_TRUE(eventually([&] { return fs::exists(criu_dir / "held"); }, 20s)) << events(id) << source.log();
  // `cnlab describe` shows the move under way, by the source's latest word.
  std::string description;
  EXPECT_TRUE(eventually(
      [&] {
        description = cnlab("describe " + id).second;
        return description.find("Migration:") != std::string::npos && description.find("dumping (") != std::string::npos;
      },
      4s))
      << description;
  EXPECT_THAT(description, HasSubstr("Migration:   node-b, asked "));
  const std::string listed = cnlab("ps --all").second;
  EXPECT_THAT(listed, HasSubstr("Running (moving)"));
  EXPECT_THAT(listed, HasSubstr("node-a -> node-b")) << "on its source, on its way to the target";
  call(*admin_, "POST", "/v1/jobs/" + id + "/cancel", 200);
  const Json ended = wait_for_end(id, 60s);
  EXPECT_EQ(ended["status"]["phase"], "Cancelled") << ended.dump();
  EXPECT_FALSE(has_event(id, "Migrated")) << events(id);
  EXPECT_THAT(events(id), HasSubstr("the job was cancelled meanwhile"));
  EXPECT_THAT(source.log(), Not(HasSubstr("migration dump sent"))) << "nothing was sent for the cancelled job";
  EXPECT_EQ(job_processes_on(id, source), 0u);
}

// A move the server gave up while its source still dumped (the source's word of progress came
// less often than the 4 s timeout, as when the server does not hear it) is not sent: the source
// sees the rollback and thaws the job, instead of sending the dump to a target that will never
// run it. The dump is held for 10 s on purpose (tests/fakes/held_criu.h): the move is given up
// after about 5.
TEST_F(MigrationTest, AMoveGivenUpWhileItsSourceDumpsIsNotSentAndTheJobRunsOnThere) {
  const fs::path criu_dir = held_criu_dir();
  AgentProcess& source = add_agent("node-a", "h100", {"--criu", held_criu(), "--migration-progress-every", "6s"});
  std::string id = submit_counter(0);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << source.log();
  AgentProcess& target = add_agent("node-b", "h100");
  test_fakes::hold_criu_command(criu_dir, "dump", 10);

  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", "node-b"}});
  ASSERT_TRUE(eventually([&] { return fs::exists(criu_dir / "held"); }, 20s)) << events(id) << source.log();
  ASSERT_TRUE(eventually([&] { return has_event(id, "MigrationFailed"); }, 20s)) << events(id);
  EXPECT_THAT(events(id), HasSubstr("migration given up: its node"));
  ASSERT_TRUE(eventually([&] { return source.log().find("job migration dropped job=\"" + id + "\"") != std::string::npos; },
                         20s))
      << source.log();
  const int at = last_tick(id);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= at + 10; }, 20s)) << "thawed on the source" << source.log();
  EXPECT_EQ(placed_on(id), "node-a");
  EXPECT_EQ(get_job(*admin_, id)["status"]["phase"], "Running");
  EXPECT_FALSE(has_event(id, "Migrated")) << events(id);
  EXPECT_THAT(source.log(), Not(HasSubstr("migration dump sent"))) << "nothing was sent for the move given up";
  EXPECT_EQ(job_processes_on(id, target), 0u);
  expect_unbroken(ticks(texts(logs(id))), at + 10);
  cancel_and_wait(id);
}

// An operator drains a node for maintenance (`cnlab admin node drain node-a`): its checkpointable
// job moves live to the other node without a gap or a repeat, and a job that is not checkpointable
// runs on where it is.
TEST_F(MigrationTest, ADrainedNodesCheckpointableJobMovesLiveAndTheOtherRunsOnThere) {
  add_agent("node-a", "h100");
  std::string id = submit_counter(0);
  Json plain_body = job_body("default", "none", {"sleep", "600"});
  plain_body["spec"]["memory_mib"] = 64;
  const std::string plain = call(*admin_, "POST", "/v1/jobs", 201, plain_body)["metadata"]["name"];
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, plain)["status"]["phase"] == "Running"; }, 20s));
  add_agent("node-b", "h100");

  auto [code, said] = cnlab("admin node drain node-a");
  ASSERT_EQ(code, 0) << said;
  EXPECT_THAT(said, HasSubstr("node node-a draining"));
  ASSERT_TRUE(eventually([&] { return has_event(id, "Migrated") && placed_on(id) == "node-b"; }, 60s))
      << events(id) << agents_[0]->log();
  EXPECT_THAT(events(id), HasSubstr("migration from node-a to node-b to drain node-a"));
  const int at = last_tick(id);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= at + 10; }, 20s)) << agents_[1]->log();
  expect_unbroken(ticks(texts(logs(id))), at + 10);
  EXPECT_EQ(placed_on(plain), "node-a");
  EXPECT_EQ(get_job(*admin_, plain)["status"]["phase"], "Running");
  EXPECT_THAT(cnlab("nodes").second, HasSubstr("draining: 1 job left")) << "the one that finishes there";
  EXPECT_THAT(cnlab("describe " + plain).second,
              HasSubstr("NotMovedForDrain  node node-a drains, and the job cannot move: the job is not checkpointable"));
  // Waiting for the drain's end, as `kubectl drain` does: the job that stays is named, with why.
  auto [timed_out, waited] = cnlab("admin node drain node-a --wait --timeout 2");
  EXPECT_EQ(timed_out, 1) << waited;
  EXPECT_THAT(waited, HasSubstr("  1 job left"));
  EXPECT_THAT(waited, HasSubstr("node node-a still has 1 job after 2s:\n  " + plain +
                                ": node node-a drains, and the job cannot move: the job is not checkpointable"));
  // Uncordoned while it waits, the node is no longer being emptied: the wait says so and fails.
  std::thread uncordon([&] {
    std::this_thread::sleep_for(2s);
    call(*admin_, "POST", "/v1/nodes/node-a/uncordon", 200);
  });
  auto [ended, said_ended] = cnlab("admin node drain node-a --wait --timeout 60");
  uncordon.join();
  EXPECT_EQ(ended, 1) << said_ended;
  EXPECT_THAT(said_ended, HasSubstr("node node-a is no longer draining (Ready) with 1 job left"));
  cancel_and_wait(id);
  std::thread cancel([&] {
    std::this_thread::sleep_for(1s);
    cancel_and_wait(plain);
  });
  auto [drained, said_drained] = cnlab("admin node drain node-a --wait --timeout 60");
  cancel.join();
  EXPECT_EQ(drained, 0) << said_drained;
  EXPECT_THAT(said_drained, HasSubstr("node node-a drained: no jobs left"));
  EXPECT_THAT(cnlab("nodes").second, HasSubstr("drained: no jobs left"));
}

// `drain --requeue` empties the node as `kubectl drain` does: the checkpointable job still moves
// live, the plain one is requeued and starts again on the other node, and `--wait` ends once
// neither is left on the node.
TEST_F(MigrationTest, ADrainWithRequeueMovesTheCheckpointableJobLiveAndStartsThePlainOneAgainElsewhere) {
  add_agent("node-a", "h100");
  std::string id = submit_counter(0);
  Json plain_body = job_body("default", "none", {"sh", "-c", "echo started on $CNLAB_NODE; sleep 600"});
  plain_body["spec"]["memory_mib"] = 64;
  const std::string plain = call(*admin_, "POST", "/v1/jobs", 201, plain_body)["metadata"]["name"];
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
  ASSERT_TRUE(eventually([&] { return log_has(plain, "started on node-a"); }, 20s));
  add_agent("node-b", "h100");

  auto [code, said] = cnlab("admin node drain node-a --requeue --wait --timeout 90");
  EXPECT_EQ(code, 0) << said << agents_[0]->log();
  EXPECT_THAT(said, HasSubstr("node node-a draining: no new work; its checkpointable jobs move live to other nodes, "
                              "the rest are requeued"));
  EXPECT_THAT(said, HasSubstr("node node-a drained: no jobs left"));
  EXPECT_TRUE(has_event(id, "Migrated")) << events(id);
  EXPECT_EQ(placed_on(id), "node-b");
  ASSERT_TRUE(eventually([&] { return log_has(plain, "started on node-b"); }, 20s)) << events(plain);
  EXPECT_THAT(events(plain), HasSubstr("node node-a drains with --requeue, and the job cannot move live: the job is not "
                                       "checkpointable (spec.checkpointable); requeued to start again from the beginning"));
  const int at = last_tick(id);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= at + 5; }, 20s)) << agents_[1]->log();
  expect_unbroken(ticks(texts(logs(id))), at + 5);
  cancel_and_wait(id);
  cancel_and_wait(plain);
}

TEST_F(MigrationTest, ATargetThatDiesMidMigrationLeavesTheJobRunningOnTheSource) {
  add_agent("node-a", "h100");
  add_agent("node-b", "h100");
  std::string id = submit_counter(0);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s));
  const std::string source = placed_on(id), target = source == "node-a" ? "node-b" : "node-a";
  agents_[source == "node-a" ? 1 : 0]->stop(SIGKILL);  // the target is gone, not yet known to be
  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", target}});
  ASSERT_TRUE(eventually([&] { return has_event(id, "MigrationFailed"); }, 30s)) << events(id);
  EXPECT_THAT(events(id), HasSubstr("carries on on " + source));
  const int at = last_tick(id);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= at + 10; }, 20s)) << "thawed on the source";
  EXPECT_EQ(placed_on(id), source);
  EXPECT_EQ(get_job(*admin_, id)["status"]["phase"], "Running");
  expect_unbroken(ticks(texts(logs(id))), at + 10);
  cancel_and_wait(id);
}

TEST_F(MigrationTest, ASourceAgentThatDiesWhileItsJobIsFrozenForAMoveLetsItCarryOnWhenItComesBack) {
  add_agent("node-a", "h100");
  add_agent("node-b", "h100");
  std::string id = submit_counter(0);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s));
  const std::string source = placed_on(id), target = source == "node-a" ? "node-b" : "node-a";
  AgentProcess& from = *agents_[source == "node-a" ? 0 : 1];
  AgentProcess& to = *agents_[source == "node-a" ? 1 : 0];
  // The target stops answering, so the source, the job dumped and frozen, waits to send it; then
  // the source's agent dies there, and the target comes back.
  to.signal(SIGSTOP);
  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", target}});
  const bool dumped = eventually(
      [&] { return from.log().find("job checkpointed job=\"" + id + "\"") != std::string::npos; }, 20s);
  from.stop(SIGKILL);
  to.signal(SIGCONT);
  ASSERT_TRUE(dumped) << events(id) << from.log();
  const int at = last_tick(id);
  // The agent that comes back finds the job frozen, and it carries on (here, or moved after all).
  from.start();
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= at + 10; }, 30s)) << events(id) << from.log();
  EXPECT_EQ(get_job(*admin_, id)["status"]["phase"], "Running");
  expect_unbroken(ticks(texts(logs(id))), at + 10);
  cancel_and_wait(id);
}

TEST_F(MigrationTest, AJobOnANodeThatDiedResumesFromItsLatestCheckpointOnAnother) {
  add_agent("node-a", "h100");
  std::string id = submit_counter(0);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s));
  auto [code, said] = cnlab("checkpoint " + id);
  EXPECT_EQ(code, 0) << said;
  EXPECT_THAT(said, HasSubstr("checkpoint of job " + id + " requested"));
  EXPECT_THAT(said, HasSubstr("job " + id + " checkpointed: process checkpoint sha256:")) << "it waits for the outcome";
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, id)["status"].contains("checkpoint"); }, 20s))
      << agents_[0]->log();
  EXPECT_EQ(get_job(*admin_, id)["status"]["checkpoint"]["kind"], "process");
  // The ticks the server has lag the process by its log shipping (a few hundred ms under load), so
  // the dump may have happened some ticks after this: run on well past it.
  const int checkpointed_by = last_tick(id);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= checkpointed_by + 15; }, 20s)) << "it ran on after the checkpoint";
  // The node dies: its agent and everything of the job with it.
  ASSERT_NO_FATAL_FAILURE(kill_node_a_and_resume_on_node_b(id, [&] { add_agent("node-b", "h100"); }));
  cancel_and_wait(id);
}

TEST_F(MigrationTest, ACorruptedCheckpointIsRefusedAndTheJobStartsAfresh) {
  add_agent("node-a", "h100");
  std::string id = submit_counter(0);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 3; }, 20s));
  call(*admin_, "POST", "/v1/jobs/" + id + "/checkpoint", 202);
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, id)["status"].contains("checkpoint"); }, 20s));
  const std::string digest = get_job(*admin_, id)["status"]["checkpoint"]["digest"];
  // Someone flips bytes in the stored archive.
  const fs::path blob = fs::path(dir_.path()) / "checkpoints" / digest.substr(7);
  ASSERT_TRUE(fs::exists(blob)) << blob;
  {
    std::fstream f(blob, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(blob) / 2));
    f.write("corrupted!", 10);
  }
  agents_[0]->stop(SIGKILL);
  kill_job_processes(id);
  add_agent("node-b", "h100");
  ASSERT_TRUE(eventually([&] { return placed_on(id) == "node-b" && last_tick(id) >= 0 && has_event(id, "Started") &&
                                      events(id).find("started on node-b") != std::string::npos; }, 30s))
      << events(id);
  EXPECT_THAT(events(id), HasSubstr("checkpoint " + digest + " not restored"));
  EXPECT_THAT(agents_[1]->log(), HasSubstr("job checkpoint not restored job=\"" + id + "\""));
  ASSERT_TRUE(eventually([&] {
    for (const auto& line : texts(logs(id))) {
      if (line.rfind("tick 0 ", 0) == 0 && ticks(texts(logs(id))).size() > 1) return true;
    }
    return false;
  }, 20s));
  cancel_and_wait(id);
}

// This process's effective capabilities include CAP_SYS_RESOURCE (24), as the agents' do.
bool holds_sys_resource() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> 24) & 1;
  }
  return false;
}

TEST_F(MigrationTest, AJobRunAsAnotherUserMigratesOnlyWhereCriuMayDumpIt) {
  run_as_ = "nobody";
  add_agent("node-a", "h100");
  add_agent("node-b", "h100");
  std::string id = submit_counter(0);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 3; }, 20s));
  const std::string target = placed_on(id) == "node-a" ? "node-b" : "node-a";
  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", target}});
  ASSERT_TRUE(eventually([&] { return has_event(id, "Migrated") || has_event(id, "MigrationFailed"); }, 30s)) << events(id);
  if (holds_sys_resource()) {
    EXPECT_TRUE(has_event(id, "Migrated")) << events(id);
  } else {
    // This VM's root: the job runs on where it was, and the event says why.
    EXPECT_THAT(events(id), HasSubstr("lacks CAP_SYS_RESOURCE"));
    EXPECT_NE(placed_on(id), target);
    const int at = last_tick(id);
    EXPECT_TRUE(eventually([&] { return last_tick(id) >= at + 3; }, 10s));
  }
  cancel_and_wait(id);
}

TEST_F(MigrationTest, AJobThatCannotMigrateIsRefusedWithTheReason) {
  // "none": its GPU jobs save their own state (SIGUSR1), as on a real node without cuda-checkpoint.
  add_agent("node-a", "h100", {"--cuda-checkpoint", "none"});
  Json body = job_body("default", "h100-25", {"sleep", "30"});
  body["spec"]["checkpointable"] = true;
  body["spec"]["memory_mib"] = 64;
  std::string gpu_job = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, gpu_job, "Running"));
  Json refused = call(*admin_, "POST", "/v1/jobs/" + gpu_job + "/migrate", 422, {{"to", "node-a"}});
  EXPECT_THAT(refused.dump(), HasSubstr("holds GPUs"));
  std::string counter = submit_counter(0);
  ASSERT_TRUE(wait_for_phase(*admin_, counter, "Running"));
  Json nowhere = call(*admin_, "POST", "/v1/jobs/" + counter + "/migrate", 404, {{"to", "node-zzz"}});
  EXPECT_THAT(nowhere.dump(), HasSubstr("node-zzz"));
  cancel_and_wait(gpu_job);
  cancel_and_wait(counter);
}

// A GPU job (tests/fakes/cuda_counter_job.py) on nodes with NVIDIA's cuda-checkpoint, here a TEST
// DOUBLE of it (tests/fakes/fake_cuda_checkpoint.py: the real utility's command line and state
// machine, no GPU), which keeps each process's CUDA state in its working directory.

class GpuMigrationTest : public MigrationTest {
 protected:
  // `vgpu`: jobs run with libcnlab-vgpu.so, whose regions keep GPU jobs from moving live.
  AgentProcess& add_gpu_agent(const std::string& name, bool vgpu = true, std::vector<std::string> flags = {},
                              const std::string& gpus = "h100x2") {
    flags.insert(flags.end(), {"--cuda-checkpoint", CNLAB_FAKE_CUDA_CHECKPOINT});
    if (!vgpu) flags.push_back("--no-vgpu");
    return add_agent(name, gpus, flags);
  }
  // A GPU job started on node-a moves live to node-b (agents with `flags`): its ticks go on
  // without a gap or a repeat, on a GPU of node-b, its CUDA state suspended on node-a for the dump
  // and restored onto that GPU.
  // `gpus`: the agents' simulated GPUs; `request`: the job's; `target_prefix`: how the UUID of
  // what it takes on node-b begins.
  void expect_gpu_job_moves_live(const std::vector<std::string>& flags, const std::string& gpus = "h100x2",
                                 const std::string& request = "h100", const std::string& target_prefix = "GPU-node-b-") {
    add_gpu_agent("node-a", /*vgpu=*/false, flags, gpus);
    std::string id = submit_cuda_counter(request);
    ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
    const std::string from_gpu = gpu_uuid(id);
    const std::string pid = ticks(texts(logs(id))).back().pid;
    add_gpu_agent("node-b", /*vgpu=*/false, flags, gpus);
    EXPECT_EQ(get_job(*admin_, id)["status"]["placement"][0]["node"], "node-a");
    migrate_to_node_b_unbroken(id);
    if (HasFatalFailure()) return;
    const std::string to_gpu = gpu_uuid(id);
    EXPECT_THAT(to_gpu, ::testing::StartsWith(target_prefix)) << "bound to a GPU of node-b";
    EXPECT_THAT(cuda_actions("node-b", id), ElementsAre(pid + " lock", pid + " checkpoint",
                                                        pid + " restore " + from_gpu + "=" + to_gpu, pid + " unlock"));
    // The frozen copy on node-a is killed as soon as node-b runs the job, without a stop grace.
    EXPECT_TRUE(eventually([&] { return agents_[0]->log().find("job ended job=\"" + id + "\"") != std::string::npos; }, 3s))
        << agents_[0]->log();
    EXPECT_THAT(agents_[0]->log(), HasSubstr("job stopping job=\"" + id + "\" reason=gone checkpoint=false transparent=false at_once=true"));
    record_pause(id);
    cancel_and_wait(id);
  }
  // `cnlab migrate ID --to node-b`: the job runs there, its ticks every one once, 5 past the move.
  void migrate_to_node_b_unbroken(const std::string& id) {
    auto [code, said] = cnlab("migrate " + id + " --to node-b");
    ASSERT_EQ(code, 0) << said;
    ASSERT_TRUE(eventually([&] { return has_event(id, "Migrated") && placed_on(id) == "node-b"; }, 60s))
        << events(id) << agents_[0]->log() << agents_[1]->log();
    const int moved_at = last_tick(id);
    ASSERT_TRUE(eventually([&] { return last_tick(id) >= moved_at + 5; }, 20s)) << agents_[1]->log();
    expect_unbroken(ticks(texts(logs(id))), moved_at + 5);
  }
  std::string submit_cuda_counter(const std::string& gpu = "h100") {
    Json body = job_body("default", gpu, {"python3", "-u", CNLAB_CUDA_COUNTER_JOB});
    body["spec"]["memory_mib"] = 256;
    body["spec"]["priority_class"] = "opportunistic";
    body["spec"]["checkpointable"] = true;
    body["spec"]["env"] = {{"FAKE_CUDA_CONTEXT", "1"}};
    return call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  }
  // What the utility did to the job on `node`: "<pid in its namespace> <action>[ <device map>]".
  std::vector<std::string> cuda_actions(const std::string& node, const std::string& id) {
    std::ifstream in(nodes_.path() + "/agent-" + node + "/jobs/" + agent::cgroup_name_for(id) + "/work/.fake-cuda-actions");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  // The simulated backend's names: GPU-<node>-<index>, and MIG-<node>-<index>-<start slot>.
  std::string gpu_uuid(const std::string& id) {
    const Json binding = get_job(*admin_, id)["status"]["placement"][0];
    const Json& gpu = binding["gpus"][0];
    const std::string name = binding["node"].get<std::string>() + "-" + std::to_string(gpu["index"].get<int>());
    const int mig_start = gpu.value("mig_start", -1);
    return mig_start < 0 ? "GPU-" + name : "MIG-" + name + "-" + std::to_string(mig_start);
  }
};

TEST_F(GpuMigrationTest, AGpuJobsCheckpointCarriesItsGpuStateAndResumesOnAnotherNodesGpu) {
  add_gpu_agent("node-a");
  std::string id = submit_cuda_counter();
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
  const std::string from_gpu = gpu_uuid(id);
  const std::string pid = ticks(texts(logs(id))).back().pid;
  auto [code, said] = cnlab("checkpoint " + id);
  EXPECT_EQ(code, 0) << said;
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, id)["status"].contains("checkpoint"); }, 20s))
      << agents_[0]->log();
  EXPECT_EQ(get_job(*admin_, id)["status"]["checkpoint"]["kind"], "process") << "a transparent one, GPU and all";
  // Suspended for the dump, resumed when thawed.
  EXPECT_THAT(cuda_actions("node-a", id),
              ElementsAre(pid + " lock", pid + " checkpoint", pid + " restore", pid + " unlock"));
  const int checkpointed_by = last_tick(id);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= checkpointed_by + 10; }, 20s)) << "it ran on after the checkpoint";
  ASSERT_NO_FATAL_FAILURE(kill_node_a_and_resume_on_node_b(id, [&] { add_gpu_agent("node-b"); }));
  // The dump carried the state it was taken in (locked, checkpointed); node-b restored it onto its
  // own GPU and unlocked it.
  EXPECT_THAT(cuda_actions("node-b", id),
              ElementsAre(pid + " lock", pid + " checkpoint", pid + " restore " + from_gpu + "=" + gpu_uuid(id),
                          pid + " unlock"));
  cancel_and_wait(id);
}

TEST_F(GpuMigrationTest, AGpuJobMigratesLiveOntoAGpuOfTheOtherNodeWithoutAGapOrARepeat) {
  expect_gpu_job_moves_live({});
}

TEST_F(GpuMigrationTest, AGpuJobMigratesPostCopyOntoAGpuOfTheOtherNode) {
  // The target resumes its CUDA state while its memory is still being pulled from the source.
  expect_gpu_job_moves_live(kPostCopy);
}

TEST_F(GpuMigrationTest, AJobInAMigInstanceMigratesLiveIntoAnInstanceMadeForItOnTheOtherNode) {
  // node-b's GPU is in MIG mode with no instance: the move makes a 3g.40gb one, which its agent
  // creates before restoring the job into it.
  expect_gpu_job_moves_live({}, "h100x1:mig", "h100:3g.40gb", "MIG-node-b-0-");
  const Json layout = call(*admin_, "GET", "/v1/nodes/node-b", 200)["status"]["gpus"][0]["mig_instances"];
  ASSERT_EQ(layout.size(), 1u) << layout.dump();
  EXPECT_EQ(layout[0]["profile"], "3g.40gb");
}

// What libcnlab-vgpu.so does at a job's first CUDA call, done in Python (the library needs a CUDA
// driver whose GPUs are the node's; these nodes' are simulated): map the job's limits region
// read-only and its tenant region, take process slot 0 (its open file description lock, held for
// the process's life) and count `mib` held on the job's GPU 0; `grow_to_mib` more once its work
// directory has a file "grow". Each tick it says which GPU its limits region names and what its
// slot holds, whenever that changes.
Json vgpu_attached_job(const std::string& gpu, int mib, int grow_to_mib = 0) {
  const std::string attach = R"(
import fcntl, mmap, os, struct, sys, time
env = {k: int(v) for k, v in os.environ.items() if k.startswith('AT_')}
tenant = open(os.path.join(os.environ['CNLAB_VGPU_DIR'], 'tenants', os.environ['CNLAB_VGPU_TENANT']), 'r+b')
region = mmap.mmap(tenant.fileno(), env['AT_TENANT_SIZE'])
limits = open(os.environ['CNLAB_VGPU_REGION'], 'rb')
view = mmap.mmap(limits.fileno(), 0, prot=mmap.PROT_READ)
fcntl.fcntl(tenant.fileno(), fcntl.F_OFD_SETLK, struct.pack('hh4xqqi4x', fcntl.F_WRLCK, 0, env['AT_TENANT_SIZE'], 1, 0))
struct.pack_into('<I', region, env['AT_SLOT0_STATE'], 1)
struct.pack_into('<Q', region, env['AT_ACTIVE'], 1)
struct.pack_into('<Q', region, env['AT_USAGE_GPU0_SLOT0'], int(sys.argv[1]) << 20)
said, i = '', 0
while True:
    if int(sys.argv[2]) and os.path.exists('grow'):
        struct.pack_into('<Q', region, env['AT_USAGE_GPU0_SLOT0'], int(sys.argv[2]) << 20)
    uuid = view[env['AT_GPU0_UUID']:env['AT_GPU0_UUID'] + 80].split(b'\0')[0].decode()
    held = struct.unpack_from('<Q', region, env['AT_USAGE_GPU0_SLOT0'])[0] >> 20
    now = f'gpu {uuid} held {held} MiB'
    if now != said:
        print(now, flush=True)
        said = now
    print(f'tick {i} pid {os.getpid()} child 0 alive True', flush=True)
    i += 1
    time.sleep(0.1)
)";
  Json body = job_body("default", gpu, {"python3", "-u", "-c", attach, std::to_string(mib), std::to_string(grow_to_mib)});
  body["spec"]["memory_mib"] = 256;
  body["spec"]["checkpointable"] = true;
  body["spec"]["env"] = {
      {"AT_TENANT_SIZE", std::to_string(sizeof(vgpu::TenantRegion))},
      {"AT_SLOT0_STATE", std::to_string(offsetof(vgpu::TenantRegion, procs) + offsetof(vgpu::ProcSlot, state))},
      {"AT_ACTIVE", std::to_string(offsetof(vgpu::TenantRegion, active_procs))},
      {"AT_USAGE_GPU0_SLOT0", std::to_string(offsetof(vgpu::TenantRegion, usage))},
      {"AT_GPU0_UUID", std::to_string(offsetof(vgpu::LimitsRegion, gpus) + offsetof(vgpu::GpuEntry, uuid))}};
  return body;
}

TEST_F(GpuMigrationTest, AJobWithTheVgpuLibraryAttachedMigratesLiveAndWhatItHoldsIsCountedOnTheTarget) {
  add_gpu_agent("node-a", /*vgpu=*/true);
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, vgpu_attached_job("h100-25", 123))["metadata"]["name"];
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << ::testing::PrintToString(texts(logs(id)))
                                                                   << agents_[0]->log();
  const std::string from_gpu = gpu_uuid(id);
  EXPECT_TRUE(log_has(id, "gpu " + from_gpu + " held 123 MiB")) << ::testing::PrintToString(texts(logs(id)));
  add_gpu_agent("node-b", /*vgpu=*/true);
  migrate_to_node_b_unbroken(id);
  if (HasFatalFailure()) return;
  // Its regions are node-b's now: its limits region names the GPU it was bound to there, and the
  // 123 MiB it holds came with it, counted for node-b's agent too (its slot's lock came back with
  // the restore, so the slot was not taken for a dead process's).
  const std::string to_gpu = gpu_uuid(id);
  EXPECT_THAT(to_gpu, ::testing::StartsWith("GPU-node-b-"));
  EXPECT_TRUE(log_has(id, "gpu " + to_gpu + " held 123 MiB")) << ::testing::PrintToString(texts(logs(id)));
  auto metrics = net::Client::connect({agents_[1]->metrics_url(), "", ""});
  ASSERT_TRUE(metrics);
  const std::string used = "cnlab_agent_vgpu_memory_used_bytes{job=\"" + id + "\",uuid=\"" + to_gpu + "\"} " +
                           std::to_string(123 << 20);
  std::string scraped_text;
  EXPECT_TRUE(eventually([&] {
    auto scraped = (*metrics)->request("GET", "/metrics");
    scraped_text = scraped ? scraped->body : "";
    return scraped_text.find(used) != std::string::npos;
  }, 5s)) << used << "\n" << scraped_text << ::testing::PrintToString(texts(logs(id))) << agents_[1]->log();
  EXPECT_FALSE(log_has(id, "libcnlab-vgpu.so attached")) << "no fallback to the job's own save";
  cancel_and_wait(id);
}

// A GPU short of the memory its tenants were promised: the agent names the job holding more than
// its quota, and the server moves it live to a node with room for it, rather than back to the
// queue. It carries on there, its ticks unbroken; the job it left room for stays where it was.
TEST_F(GpuMigrationTest, AJobHoldingMoreThanItsQuotaOnAGpuShortOfMemoryMovesLiveToANodeWithRoom) {
  add_gpu_agent("node-a", /*vgpu=*/true, {}, "h100x1");
  add_gpu_agent("node-b", /*vgpu=*/true, {}, "h100x1");
  call(*admin_, "POST", "/v1/nodes/node-b/cordon", 200);  // both jobs start on node-a's one GPU
  Json owed = job_body("default", "h100-50", {"sleep", "600"});
  owed["spec"]["memory_mib"] = 64;
  std::string other = call(*admin_, "POST", "/v1/jobs", 201, owed)["metadata"]["name"];
  // 25 blocks of an 80 GiB H100 are a 20 GiB quota; it grows to 60 GiB, leaving the other job
  // 20 GiB of its 40.
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, vgpu_attached_job("h100-25", 1024, 60 * 1024))["metadata"]["name"];
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5 && get_job(*admin_, other)["status"]["phase"] == "Running"; }, 20s))
      << ::testing::PrintToString(texts(logs(id))) << agents_[0]->log();
  EXPECT_EQ(placed_on(other), "node-a");
  call(*admin_, "POST", "/v1/nodes/node-b/uncordon", 200);
  std::ofstream(nodes_.path() + "/agent-node-a/jobs/" + agent::cgroup_name_for(id) + "/work/grow") << "";
  ASSERT_TRUE(eventually([&] { return has_event(id, "Migrated") && placed_on(id) == "node-b"; }, 60s))
      << events(id) << agents_[0]->log() << agents_[1]->log();
  EXPECT_TRUE(has_event(id, "MoveRequested")) << events(id);
  EXPECT_FALSE(has_event(id, "Preempted")) << events(id);
  const int moved_at = last_tick(id);
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= moved_at + 5; }, 20s)) << agents_[1]->log();
  expect_unbroken(ticks(texts(logs(id))), moved_at + 5);
  EXPECT_TRUE(log_has(id, "gpu " + gpu_uuid(id) + " held 61440 MiB")) << ::testing::PrintToString(texts(logs(id)));
  const Json left = get_job(*admin_, other);
  EXPECT_EQ(left["status"]["phase"], "Running") << left.dump();
  EXPECT_EQ(placed_on(other), "node-a");
  cancel_and_wait(id);
  cancel_and_wait(other);
}

// Simulated GPUs (cnlab dev) have no driver behind them: no process holds device state there, so
// without any cuda-checkpoint CRIU alone checkpoints and moves a job holding them.
TEST_F(GpuMigrationTest, AJobOnSimulatedGpusIsCheckpointedAndMovedByCriuAloneWithoutCudaCheckpoint) {
  add_agent("node-a", "h100x2", {"--cuda-checkpoint", "/nonexistent/cuda-checkpoint"});
  Json body = job_body("default", "h100-25", {"python3", "-u", "-c", kCounter, "0"});
  body["spec"]["memory_mib"] = 256;
  body["spec"]["checkpointable"] = true;
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
  EXPECT_THAT(agents_[0]->log(), HasSubstr("jobs holding simulated GPUs are dumped by CRIU alone"));
  auto [code, said] = cnlab("checkpoint " + id);
  EXPECT_EQ(code, 0) << said;
  const Json checkpoint = get_job(*admin_, id)["status"]["checkpoint"];
  EXPECT_EQ(checkpoint.value("kind", ""), "process") << said;
  EXPECT_EQ(checkpoint.value("gpus", ""), "simulated") << checkpoint.dump();
  EXPECT_FALSE(checkpoint.contains("gpu_state")) << "no process was suspended by a cuda-checkpoint";
  add_agent("node-b", "h100x2", {"--cuda-checkpoint", "/nonexistent/cuda-checkpoint"});
  migrate_to_node_b_unbroken(id);
  if (HasFatalFailure()) return;
  EXPECT_THAT(gpu_uuid(id), ::testing::StartsWith("GPU-node-b-"));
  cancel_and_wait(id);
}

// A dump holding GPU state (suspended by cuda-checkpoint on node-a) and a node without the tool to
// resume it: restored as it was, the job's next CUDA call would block for good. Node-b, whose GPUs
// are simulated and which has no cuda-checkpoint, refuses the restore and starts the job again.
TEST_F(GpuMigrationTest, ADumpHoldingGpuStateIsNotRestoredWhereNothingCanResumeIt) {
  add_gpu_agent("node-a");
  std::string id = submit_cuda_counter();
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
  auto [code, said] = cnlab("checkpoint " + id);
  ASSERT_EQ(code, 0) << said;
  agents_[0]->stop(SIGKILL);
  kill_job_processes(id);
  const size_t at_death = ticks(texts(logs(id))).size();
  add_agent("node-b", "h100x2", {"--cuda-checkpoint", "/nonexistent/cuda-checkpoint"});
  ASSERT_TRUE(eventually([&] { return placed_on(id) == "node-b" && ticks(texts(logs(id))).size() >= at_death + 5; }, 30s))
      << events(id) << agents_[1]->log();
  const auto all = ticks(texts(logs(id)));
  EXPECT_EQ(all[at_death].n, 0) << "started again from the beginning";
  EXPECT_THAT(events(id), HasSubstr("its processes not restored (its processes were dumped with their GPU state "
                                    "suspended, which only NVIDIA's cuda-checkpoint resumes, and this node has none"));
  cancel_and_wait(id);
}

// Pre-empted on node-a, whose cuda-checkpoint suspended its GPU state into the dump, while node-b
// (no utility) has room: it waits for node-a rather than start again from the beginning on node-b,
// says why, and resumes on node-a where it was once the production job has gone.
TEST_F(GpuMigrationTest, APreemptedDumpHoldingGpuStateWaitsForANodeThatCanResumeItAndResumesThere) {
  add_gpu_agent("node-a", /*vgpu=*/false);
  std::string id = submit_cuda_counter();
  ASSERT_TRUE(eventually([&] { return last_tick(id) >= 5; }, 20s)) << agents_[0]->log();
  add_agent("node-b", "h100x2", {"--cuda-checkpoint", "none"});
  // The production job needs both of node-a's GPUs: node-b is cordoned so that it pre-empts there.
  call(*admin_, "POST", "/v1/nodes/node-b/cordon", 200);
  Json urgent_body = job_body("default", "h100x2", {"sleep", "600"});
  urgent_body["spec"]["priority_class"] = "production";
  urgent_body["spec"]["memory_mib"] = 64;
  std::string urgent = call(*admin_, "POST", "/v1/jobs", 201, urgent_body)["metadata"]["name"];
  ASSERT_TRUE(eventually([&] { return has_event(id, "Released"); }, 30s)) << events(id) << agents_[0]->log();
  const Json checkpoint = get_job(*admin_, id)["status"]["checkpoint"];
  EXPECT_EQ(checkpoint["kind"], "process");
  EXPECT_EQ(checkpoint["gpu_state"], true) << checkpoint.dump();
  EXPECT_EQ(checkpoint["gpus"], "simulated");
  const int dumped_at = last_tick(id);

  call(*admin_, "POST", "/v1/nodes/node-b/uncordon", 200);
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, id)["status"].value("waiting_reason", "").find("to resume its checkpoint") != std::string::npos; }, 10s))
      << get_job(*admin_, id).dump();
  EXPECT_FALSE(eventually([&] { return !placed_on(id).empty(); }, 3s)) << "node-b has room but cannot resume it: " << events(id);
  auto [code, described] = cnlab("describe " + id);
  EXPECT_THAT(described, HasSubstr("on a node with simulated GPUs and NVIDIA's cuda-checkpoint (to resume its checkpoint)"))
      << described;
  EXPECT_THAT(described, HasSubstr("Checkpoint:  process (GPU state, simulated GPUs), ")) << described;

  call(*admin_, "POST", "/v1/jobs/" + urgent + "/cancel", 200);
  ASSERT_TRUE(eventually([&] { return placed_on(id) == "node-a" && last_tick(id) >= dumped_at + 5; }, 40s))
      << events(id) << agents_[0]->log();
  expect_unbroken(ticks(texts(logs(id))), dumped_at + 5);
  EXPECT_THAT(events(id), HasSubstr("processes restored"));
  cancel_and_wait(id);
}

TEST_F(GpuMigrationTest, AJobThatDoesNotHandleTheCheckpointSignalIsNotSentItAndRunsOn) {
  add_gpu_agent("node-a", /*vgpu=*/true, {"--criu", "none"});  // no transparent checkpoint here
  Json body = job_body("default", "h100", {"python3", "-u", "-c", "import time\nprint('up', flush=True)\ntime.sleep(600)"});
  body["spec"]["memory_mib"] = 256;
  body["spec"]["checkpointable"] = true;
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(eventually([&] { return !texts(logs(id)).empty(); }, 20s)) << agents_[0]->log();
  // The command waits for the outcome: the agent's CheckpointFailed event, saying why.
  auto [code, said] = cnlab("checkpoint " + id);
  EXPECT_NE(code, 0) << said;
  EXPECT_THAT(said, HasSubstr("checkpoint not taken on node-a: no transparent one here ("));
  EXPECT_THAT(said, HasSubstr("handles SIGUSR1, the checkpoint signal, so none was sent"));
  EXPECT_TRUE(has_event(id, "CheckpointFailed")) << events(id);
  EXPECT_TRUE(log_has(id, "handles SIGUSR1, the checkpoint signal, so none was sent"))
      << ::testing::PrintToString(texts(logs(id))) << agents_[0]->log();
  // SIGUSR1 would have killed it at once, and its agent would have said so within a second.
  EXPECT_FALSE(eventually([&] { return get_job(*admin_, id)["status"]["phase"] != "Running"; }, 2s));
  auto [asked, while_running] = cnlab("describe " + id);
  EXPECT_THAT(while_running, HasSubstr("ago, not taken on node-a: ")) << while_running;
  cancel_and_wait(id);
  auto [ended, after] = cnlab("describe " + id);
  EXPECT_THAT(after, Not(HasSubstr("ago, not taken"))) << "an ended job's ask is not pending";
}

}  // namespace
}  // namespace cnlab::server::test_support
