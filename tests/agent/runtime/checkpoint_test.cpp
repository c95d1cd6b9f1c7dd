// Transparent checkpoints through the real shim and the real CRIU: a Python job holding state in
// memory (a counter), an open file it appends to and a child process is dumped, then restored in
// another job directory (as on another node) and carries on exactly where it was. Needs root and
// a CRIU whose `criu check` passes (scripts/install-criu.sh builds one; CI has it); each test
// skips with the reason otherwise.
#include <dlfcn.h>
#include <sys/mount.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "agent/runtime/runtime.h"
#include "../../fakes/held_criu.h"
#include "test_support.h"

namespace cnlab::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace std::chrono_literals;
using namespace testing;
namespace fs = std::filesystem;

// Prints "tick N pid P child C alive A" every 100 ms and appends N to counter.txt (kept open).
constexpr const char* kCounterJob = R"(
import os, subprocess, sys, time
out = open('counter.txt', 'a')
child = subprocess.Popen([sys.executable, '-c', 'import time\nwhile True: time.sleep(0.05)'])
i = 0
while True:
    print(f'tick {i} pid {os.getpid()} child {child.pid} alive {child.poll() is None}', flush=True)
    out.write(f'{i}\n')
    out.flush()
    i += 1
    time.sleep(0.1)
)";

struct Tick {
  int n = -1;
  std::string pid, child, alive;
};

std::optional<Tick> parse_tick(const std::string& text) {
  static const std::regex pattern(R"(tick (\d+) pid (\d+) child (\d+) alive (\w+))");
  std::smatch m;
  if (!std::regex_match(text, m, pattern)) return std::nullopt;
  return Tick{std::stoi(m[1]), m[2], m[3], m[4]};
}

std::vector<Tick> ticks(const std::vector<OutputLine>& lines) {
  std::vector<Tick> out;
  for (const auto& line : lines) {
    if (auto t = parse_tick(line.text)) out.push_back(*t);
  }
  return out;
}

// Reads until the job has printed tick `n` (or the timeout passes).
std::vector<OutputLine> read_until_tick(OutputReader& reader, int n, std::chrono::milliseconds timeout = 15s) {
  return read_until(
      reader,
      [&](const std::string& text) {
        auto t = parse_tick(text);
        return t && t->n >= n;
      },
      timeout);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "CRIU dumps and restores other processes only as root (ptrace, namespaces, cgroups); CI runs as root, so these run there";
    RuntimeOptions options = checkpoint_options();
    configure(options);
    ASSERT_TRUE(start_checkpoint_runtime(options, &runtime_));
  }
  virtual void configure(RuntimeOptions&) {}
  void TearDown() override {
    EXPECT_TRUE(no_children_left(5s)) << "a shim outlived its job";
    if (runtime_) {
      EXPECT_TRUE(runtime_->remove_cgroup_parent());
    }
  }

  // A node's copy of the job: <root>/<node>/job/{run,work}.
  ProcessSpec counter_job(const std::string& node) {
    const fs::path job = dir_.path() / node / "job";
    fs::create_directories(job / "work");
    ProcessSpec spec;
    spec.job_id = "test/counter";
    spec.argv = {"/usr/bin/python3", "-u", "-c", kCounterJob};
    spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
    spec.job_dir = job / "run";
    spec.working_dir = (job / "work").string();
    return spec;
  }

  // A post-copy dump of `job` into dir_/images, its page server on a free loopback port.
  Result<std::unique_ptr<JobHandle::LazyDump>> lazy_dump(const JobHandle& job) {
    EXPECT_TRUE(enable_post_copy());
    auto port = free_tcp_port("127.0.0.1");
    if (!port) return port.error();
    return job.checkpoint_lazy(dir_.path() / "images", "127.0.0.1", *port);
  }

  // "Another node": node-a's work directory copied to node-b, the images' paths moved with it.
  Result<int> copy_to_node_b(const fs::path& images) {
    const fs::path from = dir_.path() / "node-a" / "job", to = dir_.path() / "node-b" / "job";
    fs::create_directories(to);
    fs::copy(from / "work", to / "work", fs::copy_options::recursive);
    return rewrite_checkpoint_paths(images, from, to);
  }

  // `again` (the job's copy on node-b) restored from `images`; its ticks until `until`.
  struct Restored {
    std::optional<JobHandle> job;
    std::vector<Tick> ticks;
  };
  void restore(ProcessSpec again, const fs::path& images, int until, Restored* out,
               std::chrono::milliseconds timeout = 15s) {
    again.restore_from = images;
    auto restored = runtime_->start(again);
    ASSERT_TRUE(restored) << restored.error().to_string();
    out->job = *restored;
    auto reader = OutputReader::open(restored->output_path());
    ASSERT_TRUE(reader);
    out->ticks = ticks(read_until_tick(*reader, until, timeout));
    ASSERT_FALSE(out->ticks.empty());
  }

  // Whether a job just frozen prints nothing for half a second (past what the shim had read).
  static bool prints_nothing(OutputReader& reader) {
    std::this_thread::sleep_for(300ms);
    (void)reader.read();
    std::this_thread::sleep_for(500ms);
    auto frozen = reader.read();
    return frozen && frozen->empty();
  }

  // Starts `spec` on node-a, dumps it left stopped and then again from that state (what a source
  // whose agent died while the job was frozen could have sent; JobRunner now thaws it first), and
  // restores the second dump as `again` on node-b: the ticks before the dumps, those after the
  // restore (until 3 past them), and the restored job.
  struct Redumped {
    std::vector<Tick> before, after;
    std::optional<JobHandle> restored;
  };
  void dump_stopped_twice_and_restore(const ProcessSpec& spec, ProcessSpec again, Redumped* out) {
    auto source = runtime_->start(spec);
    ASSERT_TRUE(source) << source.error().to_string();
    auto reader = OutputReader::open(source->output_path());
    ASSERT_TRUE(reader);
    auto before = read_until_tick(*reader, 2);
    ASSERT_TRUE(source->checkpoint(dir_.path() / "first", JobHandle::AfterDump::kLeaveStopped));
    const fs::path images = dir_.path() / "images";
    auto taken = source->checkpoint(images, JobHandle::AfterDump::kStop);
    ASSERT_TRUE(taken) << taken.error().to_string();
    EXPECT_EQ(source->wait(10s).state, JobState::kExited);
    for (auto& line : collect(*source, *reader)) before.push_back(std::move(line));
    out->before = ticks(before);
    ASSERT_FALSE(out->before.empty());
    ASSERT_TRUE(copy_to_node_b(images));
    Restored restored;
    restore(std::move(again), images, out->before.back().n + 3, &restored, 5s);
    out->restored = restored.job;
    out->after = restored.ticks;
  }

  // Starts `spec` on node-a, which says "node_a" in its ticks, and dumps it into dir_/images (the
  // job gone), `external` among the mounts passed as external; `last` is the last tick it printed.
  void dump_from_node_a(const ProcessSpec& spec, const std::string& external, Tick* last) {
    auto source = runtime_->start(spec);
    ASSERT_TRUE(source) << source.error().to_string();
    auto reader = OutputReader::open(source->output_path());
    ASSERT_TRUE(reader);
    auto before = read_until_tick(*reader, 3);
    ASSERT_FALSE(ticks(before).empty());
    EXPECT_EQ(ticks(before).back().alive, "node_a");
    const fs::path images = dir_.path() / "images";
    auto taken = source->checkpoint(images, JobHandle::AfterDump::kStop);
    ASSERT_TRUE(taken) << taken.error().to_string();
    EXPECT_THAT(read_text(images / "cnlab-external-mounts.json"), HasSubstr(external));
    EXPECT_EQ(source->wait(10s).state, JobState::kExited);
    for (auto& line : collect(*source, *reader)) before.push_back(std::move(line));
    *last = ticks(before).back();
  }

  std::vector<int> counter_file(const std::string& node) {
    std::vector<int> out;
    std::istringstream in(read_text(dir_.path() / node / "job" / "work" / "counter.txt"));
    int n;
    while (in >> n) out.push_back(n);
    return out;
  }

  TempDir dir_;
  std::unique_ptr<Runtime> runtime_;
};

TEST_F(CheckpointTest, AJobDumpedOnOneNodeCarriesOnExactlyWhereItWasInAnotherDirectory) {
  auto source = runtime_->start(counter_job("node-a"));
  ASSERT_TRUE(source) << source.error().to_string();
  auto reader = OutputReader::open(source->output_path());
  ASSERT_TRUE(reader);
  auto before = read_until_tick(*reader, 5);
  ASSERT_FALSE(ticks(before).empty());

  const fs::path images = dir_.path() / "images";
  auto taken = source->checkpoint(images, JobHandle::AfterDump::kStop);
  ASSERT_TRUE(taken) << taken.error().to_string();
  EXPECT_GT(taken->bytes, 1u << 20) << "a Python process and its child are megabytes of memory";
  EXPECT_GT(taken->pause.count(), 0);
  // Dumped without leave_running: the job is gone from this node.
  const JobStatus ended = source->wait(10s);
  EXPECT_EQ(ended.state, JobState::kExited);
  for (auto& line : collect(*source, *reader)) before.push_back(std::move(line));
  const std::vector<Tick> first = ticks(before);
  ASSERT_GE(first.size(), 6u);
  const Tick last = first.back();

  // "Another node": the work directory moves, the images' paths follow it, the old one is gone.
  auto rewritten = copy_to_node_b(images);
  fs::remove_all(dir_.path() / "node-a" / "job" / "work");
  ASSERT_TRUE(rewritten) << rewritten.error().to_string();
  EXPECT_GE(*rewritten, 2) << "the open counter.txt and the working directory";

  Restored restored;
  restore(counter_job("node-b"), images, last.n + 5, &restored);
  ASSERT_TRUE(restored.job);
  const std::vector<Tick>& after = restored.ticks;
  // No gap, no repeat: the first tick after the restore is the next one, with the same process
  // (its PID in its namespace), the same child, still alive.
  EXPECT_EQ(after.front().n, last.n + 1);
  for (size_t i = 1; i < after.size(); ++i) EXPECT_EQ(after[i].n, after[i - 1].n + 1);
  EXPECT_EQ(after.front().pid, last.pid);
  EXPECT_EQ(after.front().child, last.child);
  EXPECT_EQ(after.back().alive, "True");

  auto stopped = restored.job->stop(2s);
  ASSERT_TRUE(stopped) << stopped.error().to_string();
  // The file it kept open was appended to at its offset: every number once, in order.
  const std::vector<int> counted = counter_file("node-b");
  ASSERT_GE(counted.size(), static_cast<size_t>(last.n + 6));
  for (size_t i = 0; i < counted.size(); ++i) EXPECT_EQ(counted[i], static_cast<int>(i));
}

// A mount CRIU cannot dump itself in the job's mount namespace (ramfs here; on an H200 machine,
// the squashfs the NVIDIA driver is mounted from, which failed every GPU job's dump there) is
// dumped as external, and the restore binds the restoring machine's same path in its place: the
// job keeps its file there open across the move and reads what that machine has.
TEST_F(CheckpointTest, AMountCriuCannotDumpIsBoundFromTheRestoringMachine) {
  const fs::path mount_point = dir_.path() / "driver";
  fs::create_directories(mount_point);
  ASSERT_EQ(::mount("ramfs", mount_point.c_str(), "ramfs", 0, nullptr), 0) << std::strerror(errno);
  struct Unmount {
    fs::path at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{mount_point};
  const fs::path library = mount_point / "driver.txt";
  { std::ofstream(library) << "node_a\n"; }

  ProcessSpec spec = counter_job("node-a");
  // Prints "tick N pid P child 0 alive WORD", WORD read each time through a descriptor it keeps
  // open on the mount (as a CUDA process keeps libcuda.so mapped from the driver's).
  spec.argv = {"/usr/bin/python3", "-u", "-c", R"(
import os, sys, time
held = os.open(sys.argv[1], os.O_RDONLY)
i = 0
while True:
    print(f'tick {i} pid {os.getpid()} child 0 alive {os.pread(held, 64, 0).decode().strip()}', flush=True)
    i += 1
    time.sleep(0.1)
)", library.string()};
  Tick last;
  dump_from_node_a(spec, mount_point.string(), &last);
  if (HasFatalFailure()) return;
  const fs::path images = dir_.path() / "images";

  // "Another node": what it has at that path now.
  { std::ofstream(library) << "node_b\n"; }
  ASSERT_TRUE(copy_to_node_b(images));
  ProcessSpec again = spec;
  again.job_dir = dir_.path() / "node-b" / "job" / "run";
  again.working_dir = (dir_.path() / "node-b" / "job" / "work").string();
  Restored restored;
  restore(again, images, last.n + 3, &restored);
  ASSERT_TRUE(restored.job);
  EXPECT_EQ(restored.ticks.front().n, last.n + 1);
  EXPECT_EQ(restored.ticks.front().pid, last.pid);
  EXPECT_EQ(restored.ticks.back().alive, "node_b");
  ASSERT_TRUE(restored.job->stop(2s));
}

// Where jobs have namespaces the agent gives each its directories at view paths, the same on every
// node. A job restored in another directory (as on a node whose data directory is elsewhere) keeps
// them: the restore binds the restoring node's copy at the view, so what it opens by name after the
// move is that node's, even once the first node's copy is gone, and the file it kept open goes on.
TEST_F(CheckpointTest, AJobsViewPathsLeadToTheRestoringNodesDirectoriesAfterARestore) {
  const std::string view = std::string(kJobViewRoot) + "/work";
  // Prints "tick N pid P child 0 alive WORD", WORD read afresh by name from its working directory.
  auto on = [&](const std::string& node) {
    ProcessSpec spec = counter_job(node);
    spec.view_mounts = {{dir_.path() / node / "job" / "work", view}};
    spec.working_dir = view;
    spec.argv = {"/usr/bin/python3", "-u", "-c", R"(
import os, time
out = open('counter.txt', 'a')
i = 0
while True:
    where = open(os.path.join(os.getcwd(), 'where.txt')).read().strip()
    print(f'tick {i} pid {os.getpid()} child 0 alive {where}', flush=True)
    out.write(f'{i}\n')
    out.flush()
    i += 1
    time.sleep(0.1)
)"};
    return spec;
  };
  fs::create_directories(dir_.path() / "node-a" / "job" / "work");
  { std::ofstream(dir_.path() / "node-a" / "job" / "work" / "where.txt") << "node_a\n"; }
  Tick last;
  dump_from_node_a(on("node-a"), view, &last);
  if (HasFatalFailure()) return;
  const fs::path images = dir_.path() / "images";

  ASSERT_TRUE(copy_to_node_b(images));
  fs::remove_all(dir_.path() / "node-a" / "job" / "work");
  { std::ofstream(dir_.path() / "node-b" / "job" / "work" / "where.txt") << "node_b\n"; }
  Restored restored;
  restore(on("node-b"), images, last.n + 3, &restored);
  ASSERT_TRUE(restored.job);
  EXPECT_EQ(restored.ticks.front().n, last.n + 1);
  EXPECT_EQ(restored.ticks.front().pid, last.pid);
  EXPECT_EQ(restored.ticks.back().alive, "node_b");
  ASSERT_TRUE(restored.job->stop(2s));
  const std::vector<int> counted = counter_file("node-b");
  ASSERT_GE(counted.size(), static_cast<size_t>(last.n + 4));
  for (size_t i = 0; i < counted.size(); ++i) EXPECT_EQ(counted[i], static_cast<int>(i));
  EXPECT_FALSE(fs::exists(fs::path(view) / "counter.txt")) << "nothing reached the host's mount point";
}

TEST_F(CheckpointTest, APostCopyDumpRunsElsewhereAtOnceAndItsPagesFollow) {
  auto source = runtime_->start(counter_job("node-a"));
  ASSERT_TRUE(source) << source.error().to_string();
  auto reader = OutputReader::open(source->output_path());
  ASSERT_TRUE(reader);
  (void)read_until_tick(*reader, 5);

  const fs::path images = dir_.path() / "images";
  auto dump = lazy_dump(*source);
  ASSERT_TRUE(dump) << dump.error().to_string();
  EXPECT_LT((*dump)->taken().bytes, 8u << 20) << "the images hold no memory";
  EXPECT_EQ((*dump)->page_server().host, "127.0.0.1");
  EXPECT_GT((*dump)->page_server().port, 0);
  EXPECT_EQ(source->status().state, JobState::kRunning) << "left stopped, not ended";

  // "Another node" restores it from the images and pulls the pages from the page server.
  ASSERT_TRUE(copy_to_node_b(images));
  ProcessSpec again = counter_job("node-b");
  again.restore_from = images;
  again.pages_from = format_host_port((*dump)->page_server());
  again.cgroup_name = "counter-node-b";  // the stopped source still holds its own
  auto restored = runtime_->start(again);
  ASSERT_TRUE(restored) << restored.error().to_string();
  auto restored_reader = OutputReader::open(restored->output_path());
  ASSERT_TRUE(restored_reader);
  const std::vector<Tick> after = ticks(read_until_tick(*restored_reader, 1000, 3s));
  ASSERT_GE(after.size(), 5u) << "the restored copy runs on";
  for (size_t i = 1; i < after.size(); ++i) EXPECT_EQ(after[i].n, after[i - 1].n + 1);
  EXPECT_EQ(after.back().alive, "True");
  EXPECT_TRUE((*dump)->wait_served(60s)) << "every page was pulled";
  ASSERT_TRUE(restored->stop(2s));
  ASSERT_TRUE(source->stop(1s));
  const std::vector<int> counted = counter_file("node-b");
  for (size_t i = 0; i < counted.size(); ++i) EXPECT_EQ(counted[i], static_cast<int>(i));
}

TEST_F(CheckpointTest, APostCopyDumpStoppedBeforeAnyRestoreLetsTheJobRunOn) {
  auto job = runtime_->start(counter_job("node-a"));
  ASSERT_TRUE(job) << job.error().to_string();
  auto reader = OutputReader::open(job->output_path());
  ASSERT_TRUE(reader);
  (void)read_until_tick(*reader, 2);
  auto dump = lazy_dump(*job);
  ASSERT_TRUE(dump) << dump.error().to_string();
  EXPECT_TRUE(prints_nothing(*reader)) << "held while CRIU serves its pages";
  (*dump)->cancel();  // the target never came: CRIU lets go of the job
  EXPECT_FALSE((*dump)->wait_served(1s));
  ASSERT_TRUE(job->thaw());  // harmless
  EXPECT_GE(ticks(read_until_tick(*reader, 1000, 2s)).size(), 5u) << "the job carries on";
  ASSERT_TRUE(job->stop(2s));
}

TEST_F(CheckpointTest, DirtyMemoryTrackingIsDetectedNotAssumed) {
  // What CRIU says of this kernel, asked directly, is what the runtime reports.
  const std::string command = find_criu() + " check --feature mem_dirty_track >/dev/null 2>&1";
  const bool tracks = std::system(command.c_str()) == 0;
  EXPECT_EQ(runtime_->capabilities().dirty_tracking, tracks);
}

TEST_F(CheckpointTest, APeriodicCheckpointLeavesTheJobRunning) {
  auto job = runtime_->start(counter_job("node-a"));
  ASSERT_TRUE(job) << job.error().to_string();
  auto reader = OutputReader::open(job->output_path());
  ASSERT_TRUE(reader);
  const int at = ticks(read_until_tick(*reader, 2)).back().n;
  auto taken = job->checkpoint(dir_.path() / "images", JobHandle::AfterDump::kLeaveRunning);
  ASSERT_TRUE(taken) << taken.error().to_string();
  const std::vector<Tick> later = ticks(read_until_tick(*reader, at + 4));
  ASSERT_FALSE(later.empty());
  EXPECT_GE(later.back().n, at + 4) << "the job kept printing after its checkpoint";
  EXPECT_EQ(job->status().state, JobState::kRunning);
  ASSERT_TRUE(job->stop(2s));
}

TEST_F(CheckpointTest, AJobLeftStoppedPrintsNothingUntilThawed) {
  auto job = runtime_->start(counter_job("node-a"));
  ASSERT_TRUE(job) << job.error().to_string();
  auto reader = OutputReader::open(job->output_path());
  ASSERT_TRUE(reader);
  (void)read_until_tick(*reader, 2);
  EXPECT_FALSE(job->frozen());
  auto taken = job->checkpoint(dir_.path() / "images", JobHandle::AfterDump::kLeaveStopped);
  ASSERT_TRUE(taken) << taken.error().to_string();
  EXPECT_TRUE(prints_nothing(*reader)) << "a stopped job printed";
  EXPECT_TRUE(job->frozen());
  auto adopted = runtime_->adopt(job->job_dir());  // as an agent started afterwards sees it
  ASSERT_TRUE(adopted) << adopted.error().to_string();
  EXPECT_TRUE(adopted->frozen());
  ASSERT_TRUE(job->thaw());
  EXPECT_FALSE(job->frozen());
  const auto thawed = ticks(read_until_tick(*reader, 1000, 2s));
  EXPECT_GE(thawed.size(), 5u) << "the job carries on once thawed";
  ASSERT_TRUE(job->stop(2s));
}

TEST_F(CheckpointTest, AJobDumpedWhileLeftStoppedRunsWhenRestored) {
  // CRIU restores such a tree stopped, and the runtime continues it.
  Redumped r;
  ASSERT_NO_FATAL_FAILURE(dump_stopped_twice_and_restore(counter_job("node-a"), counter_job("node-b"), &r));
  EXPECT_FALSE(r.restored->frozen());
  ASSERT_FALSE(r.after.empty()) << "the restored job printed nothing";
  EXPECT_EQ(r.after.front().n, r.before.back().n + 1);
  ASSERT_TRUE(r.restored->stop(2s));
}

TEST_F(CheckpointTest, ARestoreFromSomethingThatIsNotACheckpointFailsAndSaysWhy) {
  const fs::path images = dir_.path() / "not-images";
  fs::create_directories(images);
  std::ofstream(images / "cnlab-pipes.json") << R"({"stdout_pipe": 1, "stderr_pipe": 2, "status_pipe": 3})";
  std::ofstream(images / "files.img") << "garbage";
  ProcessSpec spec = counter_job("node-a");
  spec.restore_from = images;
  auto restored = runtime_->start(spec);
  ASSERT_FALSE(restored);
  EXPECT_THAT(restored.error().message, HasSubstr("CRIU could not restore the job"));
}

TEST_F(CheckpointTest, AFinishedJobIsNotCheckpointed) {
  ProcessSpec spec = counter_job("node-a");
  spec.argv = {"/bin/true"};
  auto job = runtime_->start(spec);
  ASSERT_TRUE(job) << job.error().to_string();
  EXPECT_EQ(job->wait(10s).state, JobState::kExited);
  auto taken = job->checkpoint(dir_.path() / "images", JobHandle::AfterDump::kStop);
  ASSERT_FALSE(taken);
  EXPECT_THAT(taken.error().message, HasSubstr("is not running"));
}

// A restore its caller gives up (ProcessSpec::give_up_restore: a migration's target once the
// server no longer waits for the move), while CRIU is held in one of its commands on purpose
// (tests/fakes/held_criu.h, a script in front of the real CRIU).
class GivenUpRestoreTest : public CheckpointTest {
 protected:
  // Clears what the previous round left. Its shim may still be removing its own files (the
  // control socket) as this runs, and remove_all throws on a file that vanishes under it: retried.
  void clear_round() {
    for (const char* part : {"node-a", "node-b", "images"}) {
      const fs::path path = dir_.path() / part;
      std::error_code ec;
      for (int attempt = 0; attempt < 100 && fs::exists(path); ++attempt) {
        fs::remove_all(path, ec);
        if (fs::exists(path)) std::this_thread::sleep_for(20ms);
      }
      ASSERT_FALSE(fs::exists(path)) << path << ": " << ec.message();
    }
    fs::remove(criu_dir() / "held");
  }
  void configure(RuntimeOptions& options) override {
    fs::create_directories(criu_dir());
    options.criu = test_fakes::write_held_criu(criu_dir(), options.criu);
  }
  fs::path criu_dir() const { return dir_.path() / "held-criu"; }

  // Starts `spec` (a restore), holding `criu <command>`, and gives it up a second later: start()
  // fails at once, saying so, and leaves no CRIU restoring or pulling pages.
  void expect_given_up(ProcessSpec spec, const std::string& command) {
    test_fakes::hold_criu_command(criu_dir(), command);
    const auto asked = std::chrono::steady_clock::now();
    spec.give_up_restore = [&] { return std::chrono::steady_clock::now() - asked > 1s; };
    auto restored = runtime_->start(spec);
    const auto took = std::chrono::steady_clock::now() - asked;
    fs::remove(criu_dir() / "hold");
    ASSERT_FALSE(restored) << "restored although given up";
    EXPECT_THAT(restored.error().message, HasSubstr("its restore was given up"));
    EXPECT_TRUE(fs::exists(criu_dir() / "held")) << "criu " << command << " was reached";
    EXPECT_LT(took, 15s) << "it waited for CRIU, held for a minute";
    EXPECT_TRUE(eventually_no_criu({"restore", "lazy-pages"}));
  }
  // Whether, within a few seconds, no process below this one runs `criu <command>` for any of
  // `commands` (the held script's command line names it too).
  static bool eventually_no_criu(const std::vector<std::string>& commands) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (true) {
      std::string left;
      for (const ProcessId& process : descendants(::getpid())) {
        const std::string cmdline = read_text("/proc/" + std::to_string(process.pid) + "/cmdline");
        for (const auto& command : commands) {
          if (cmdline.find("criu") != std::string::npos && cmdline.find('\0' + command + '\0') != std::string::npos &&
              still_running(process)) {
            left += " " + std::to_string(process.pid) + " (criu " + command + ")";
          }
        }
      }
      if (left.empty()) return true;
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "still running:" << left;
        return false;
      }
      std::this_thread::sleep_for(50ms);
    }
  }
};

TEST_F(GivenUpRestoreTest, ARestoreGivenUpWhileCriuRestoresEndsAtOnceAndTheImagesStillRestore) {
  auto source = runtime_->start(counter_job("node-a"));
  ASSERT_TRUE(source) << source.error().to_string();
  auto reader = OutputReader::open(source->output_path());
  ASSERT_TRUE(reader);
  auto printed = read_until_tick(*reader, 2);
  const fs::path images = dir_.path() / "images";
  ASSERT_TRUE(source->checkpoint(images, JobHandle::AfterDump::kStop));
  EXPECT_EQ(source->wait(10s).state, JobState::kExited);
  for (auto& line : collect(*source, *reader)) printed.push_back(std::move(line));
  const std::vector<Tick> before = ticks(printed);
  ASSERT_FALSE(before.empty());
  ASSERT_TRUE(copy_to_node_b(images));
  ProcessSpec again = counter_job("node-b");
  again.restore_from = images;
  ASSERT_NO_FATAL_FAILURE(expect_given_up(again, "restore"));

  // Nothing it left (cgroup, processes, files) stands in the way of restoring the images after all.
  fs::remove_all(again.job_dir);
  auto restored = runtime_->start(again);
  ASSERT_TRUE(restored) << restored.error().to_string();
  auto restored_reader = OutputReader::open(restored->output_path());
  ASSERT_TRUE(restored_reader);
  const std::vector<Tick> after = ticks(read_until_tick(*restored_reader, 1000, 2s));
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.front().n, before.back().n + 1) << "exactly where it was";
  ASSERT_TRUE(restored->stop(2s));
}

TEST_F(GivenUpRestoreTest, APostCopyRestoreGivenUpEndsItsPagePullAndTheSourceRunsOn) {
  for (const std::string command : {"lazy-pages", "restore"}) {
    SCOPED_TRACE("held: criu " + command);
    ASSERT_NO_FATAL_FAILURE(clear_round());
    auto source = runtime_->start(counter_job("node-a"));
    ASSERT_TRUE(source) << source.error().to_string();
    auto reader = OutputReader::open(source->output_path());
    ASSERT_TRUE(reader);
    (void)read_until_tick(*reader, 2);
    auto dump = lazy_dump(*source);
    ASSERT_TRUE(dump) << dump.error().to_string();
    ASSERT_TRUE(copy_to_node_b(dir_.path() / "images"));
    ProcessSpec again = counter_job("node-b");
    again.restore_from = dir_.path() / "images";
    again.pages_from = format_host_port((*dump)->page_server());
    again.cgroup_name = "counter-node-b";  // the stopped source still holds its own
    ASSERT_NO_FATAL_FAILURE(expect_given_up(again, command));
    // The move is off: the source's CRIU lets go of the job, which carries on there.
    (*dump)->cancel();
    EXPECT_FALSE((*dump)->wait_served(1s));
    ASSERT_TRUE(source->thaw());
    EXPECT_GE(ticks(read_until_tick(*reader, 1000, 2s)).size(), 5u) << "the source's job carries on";
    ASSERT_TRUE(source->stop(2s));
  }
}

// A job holding a CUDA context (tests/fakes/cuda_counter_job.py), on a node with cuda-checkpoint.
// The utility is a TEST DOUBLE (tests/fakes/fake_cuda_checkpoint.py: the real one's command line
// and state machine, no GPU), which keeps each process's CUDA state in its working directory.

class GpuCheckpointTest : public CheckpointTest {
 protected:
  void configure(RuntimeOptions& options) override { options.cuda_checkpoint = CNLAB_FAKE_CUDA_CHECKPOINT; }

  ProcessSpec cuda_job(const std::string& node, const std::string& fail_action = "") {
    ProcessSpec spec = counter_job(node);
    spec.argv = {"/usr/bin/python3", "-u", CNLAB_CUDA_COUNTER_JOB};
    spec.env.push_back("FAKE_CUDA_CONTEXT=1");
    if (!fail_action.empty()) spec.env.push_back("FAKE_CUDA_FAIL=" + fail_action);
    return spec;
  }
  // What the utility did, in order: "<pid in the job's namespace> <action>[ <device map>]".
  std::vector<std::string> cuda_actions(const std::string& node) {
    std::vector<std::string> out;
    std::istringstream in(read_text(dir_.path() / node / "job" / "work" / ".fake-cuda-actions"));
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
};

TEST_F(GpuCheckpointTest, ACudaProcessIsSuspendedForItsDumpAndResumedOntoTheGpusItIsRestoredOn) {
  ASSERT_TRUE(runtime_->capabilities().gpu_checkpoint) << runtime_->capabilities().gpu_checkpoint_reason;
  auto source = runtime_->start(cuda_job("node-a"));
  ASSERT_TRUE(source) << source.error().to_string();
  auto reader = OutputReader::open(source->output_path());
  ASSERT_TRUE(reader);
  auto before = read_until_tick(*reader, 3);
  const std::string pid = ticks(before).back().pid;
  const fs::path images = dir_.path() / "images";
  auto taken = source->checkpoint(images, JobHandle::AfterDump::kStop);
  ASSERT_TRUE(taken) << taken.error().to_string();
  EXPECT_EQ(source->wait(10s).state, JobState::kExited);
  for (auto& line : collect(*source, *reader)) before.push_back(std::move(line));
  const Tick last = ticks(before).back();
  // Suspended before CRIU dumped it (what the dump carries says so), and only the CUDA process.
  EXPECT_THAT(cuda_actions("node-a"), ElementsAre(pid + " lock", pid + " checkpoint"));
  EXPECT_EQ(taken->cuda_processes, 1) << "the dump says it holds one process's GPU state";
  EXPECT_EQ(read_text(dir_.path() / "node-a" / "job" / "work" / (".fake-cuda-state." + pid)), "checkpointed");

  ASSERT_TRUE(copy_to_node_b(images));
  ProcessSpec again = cuda_job("node-b");
  again.gpu_device_map = {{"GPU-node-a-1", "GPU-node-b-0"}};
  Restored restored;
  restore(again, images, last.n + 3, &restored);
  ASSERT_TRUE(restored.job);
  EXPECT_EQ(restored.ticks.front().n, last.n + 1) << "carried on from where it was dumped";
  EXPECT_EQ(restored.ticks.front().pid, pid);
  // Restored onto node-b's GPU (the device map) and unlocked: its CUDA calls run again.
  EXPECT_THAT(cuda_actions("node-b"), ElementsAre(pid + " lock", pid + " checkpoint",
                                                  pid + " restore GPU-node-a-1=GPU-node-b-0", pid + " unlock"));
  ASSERT_TRUE(restored.job->stop(2s));
}

TEST_F(GpuCheckpointTest, ADumpThatLeavesTheJobRunningOrStoppedResumesItsCudaStateWhenItRuns) {
  auto job = runtime_->start(cuda_job("node-a"));
  ASSERT_TRUE(job) << job.error().to_string();
  auto reader = OutputReader::open(job->output_path());
  ASSERT_TRUE(reader);
  const int at = ticks(read_until_tick(*reader, 2)).back().n;
  const std::string pid = ticks(read_until_tick(*reader, at + 1)).back().pid;
  ASSERT_TRUE(job->checkpoint(dir_.path() / "periodic", JobHandle::AfterDump::kLeaveRunning));
  EXPECT_THAT(cuda_actions("node-a"), ElementsAre(pid + " lock", pid + " checkpoint", pid + " restore", pid + " unlock"));
  const int resumed_at = ticks(read_until_tick(*reader, at + 4)).back().n;
  EXPECT_GE(resumed_at, at + 4) << "it runs on after a periodic checkpoint";
  // Left stopped (a migration's source): still suspended until thawed.
  ASSERT_TRUE(job->checkpoint(dir_.path() / "move", JobHandle::AfterDump::kLeaveStopped));
  EXPECT_EQ(cuda_actions("node-a").size(), 6u);
  ASSERT_TRUE(job->thaw());
  EXPECT_EQ(cuda_actions("node-a").size(), 8u);
  EXPECT_EQ(cuda_actions("node-a").back(), pid + " unlock");
  const auto thawed = ticks(read_until_tick(*reader, resumed_at + 4));
  ASSERT_FALSE(thawed.empty());
  EXPECT_GE(thawed.back().n, resumed_at + 4) << "it runs on once thawed";
  ASSERT_TRUE(job->stop(2s));
}

TEST_F(GpuCheckpointTest, AJobDumpedAgainWhileLeftStoppedIsRestoredOntoTheMappedGpus) {
  // Suspended by the first dump and left so: the second carries that state, and the restore, which
  // finds the tree stopped and continues it, resumes it onto the new GPU, not the old one.
  ProcessSpec again = cuda_job("node-b");
  again.gpu_device_map = {{"GPU-node-a-0", "GPU-node-b-1"}};
  Redumped r;
  ASSERT_NO_FATAL_FAILURE(dump_stopped_twice_and_restore(cuda_job("node-a"), again, &r));
  ASSERT_FALSE(r.after.empty()) << "the restored job printed nothing";
  EXPECT_EQ(r.after.front().n, r.before.back().n + 1);
  const std::string pid = r.before.back().pid;
  EXPECT_THAT(cuda_actions("node-b"), ElementsAre(pid + " lock", pid + " checkpoint",
                                                  pid + " restore GPU-node-a-0=GPU-node-b-1", pid + " unlock"));
  ASSERT_TRUE(r.restored->stop(2s));
}

TEST_F(GpuCheckpointTest, AJobThatSeesNoGpuIsDumpedWithoutAskingTheUtility) {
  // What the agent gives a job without GPUs: CUDA shows it no device, so it holds no context (the
  // double would say otherwise, were it asked).
  ProcessSpec spec = cuda_job("node-a");
  spec.env.push_back("CUDA_VISIBLE_DEVICES=");
  auto job = runtime_->start(spec);
  ASSERT_TRUE(job) << job.error().to_string();
  auto reader = OutputReader::open(job->output_path());
  ASSERT_TRUE(reader);
  (void)read_until_tick(*reader, 2);
  ASSERT_TRUE(job->checkpoint(dir_.path() / "images", JobHandle::AfterDump::kLeaveRunning));
  EXPECT_THAT(cuda_actions("node-a"), IsEmpty());
  ASSERT_TRUE(job->stop(2s));
}

TEST_F(GpuCheckpointTest, ACudaProcessThatCannotBeSuspendedFailsTheDumpAndRunsOn) {
  auto job = runtime_->start(cuda_job("node-a", "checkpoint"));
  ASSERT_TRUE(job) << job.error().to_string();
  auto reader = OutputReader::open(job->output_path());
  ASSERT_TRUE(reader);
  const auto seen = ticks(read_until_tick(*reader, 2));
  const std::string pid = seen.back().pid;
  auto taken = job->checkpoint(dir_.path() / "images", JobHandle::AfterDump::kStop);
  ASSERT_FALSE(taken);
  EXPECT_THAT(taken.error().message, HasSubstr("its GPU state could not be suspended"));
  EXPECT_THAT(taken.error().message, HasSubstr("operation not supported"));
  // Locked, refused, unlocked again: its CUDA calls go on, and so does the job.
  EXPECT_THAT(cuda_actions("node-a"), ElementsAre(pid + " lock", pid + " unlock"));
  const auto later = ticks(read_until_tick(*reader, seen.back().n + 3));
  ASSERT_FALSE(later.empty());
  EXPECT_GE(later.back().n, seen.back().n + 3);
  EXPECT_EQ(job->status().state, JobState::kRunning);
  ASSERT_TRUE(job->stop(2s));
}

TEST(GpuCheckpointCapability, ANodeWithoutCudaCheckpointSaysWhy) {
  RuntimeOptions options = test_options();
  options.use_namespaces = false;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().to_string();
  EXPECT_FALSE((*runtime)->capabilities().gpu_checkpoint);
  EXPECT_THAT((*runtime)->capabilities().gpu_checkpoint_reason, HasSubstr("no transparent checkpoints on this node"));
  if (::geteuid() != 0 || find_criu().empty()) return;  // the rest needs a working CRIU
  options.use_namespaces = true;
  options.criu = find_criu();
  options.cuda_checkpoint = "/nonexistent/cuda-checkpoint";
  runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().to_string();
  EXPECT_FALSE((*runtime)->capabilities().gpu_checkpoint);
  EXPECT_THAT((*runtime)->capabilities().gpu_checkpoint_reason, HasSubstr("/nonexistent/cuda-checkpoint cannot be run"));
  // CNLab's own tool is beside every cnlab binary: it is asked whether the driver can checkpoint.
  if (void* real = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(real);
    return;  // a real driver here: whether it has the API is the machine's, not this test's
  }
  options.cuda_checkpoint = CNLAB_CUDA_CHECKPOINT_TOOL;
  runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().to_string();
  EXPECT_FALSE((*runtime)->capabilities().gpu_checkpoint);
  EXPECT_THAT((*runtime)->capabilities().gpu_checkpoint_reason, HasSubstr("cannot load libcuda.so.1"));
}

// Simulated GPUs (cnlab dev, a laptop) have no driver behind them, so no process holds device
// state there: without a usable cuda-checkpoint, CRIU alone dumps the jobs holding them.
TEST(GpuCheckpointCapability, SimulatedGpusAreDumpedByCriuAloneUnlessAToolCarriesTheirState) {
  RuntimeOptions options = test_options();
  options.simulated_gpus = true;
  options.use_namespaces = false;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().to_string();
  EXPECT_FALSE((*runtime)->capabilities().gpu_checkpoint) << "no CRIU dumps at all without namespaces";
  if (::geteuid() != 0 || find_criu().empty()) GTEST_SKIP() << "the rest needs root and a working CRIU";
  options.use_namespaces = true;
  options.criu = find_criu();
  options.cuda_checkpoint = "/nonexistent/cuda-checkpoint";
  runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().to_string();
  EXPECT_TRUE((*runtime)->capabilities().gpu_checkpoint);
  EXPECT_FALSE((*runtime)->capabilities().cuda_state);
  EXPECT_EQ((*runtime)->capabilities().gpu_checkpoint_reason, "");
  options.simulated_gpus = false;  // the same node with real GPUs: their state would be lost
  runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().to_string();
  EXPECT_FALSE((*runtime)->capabilities().gpu_checkpoint);
  options.simulated_gpus = true;  // a usable tool is used, simulated or not (tests' doubles)
  options.cuda_checkpoint = CNLAB_FAKE_CUDA_CHECKPOINT;
  runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().to_string();
  EXPECT_TRUE((*runtime)->capabilities().gpu_checkpoint);
  EXPECT_TRUE((*runtime)->capabilities().cuda_state);
}

TEST(CheckpointCapability, WithoutNamespacesThereAreNoTransparentCheckpoints) {
  RuntimeOptions options = test_options();
  options.criu = "/usr/local/sbin/criu";
  options.use_namespaces = false;
  options.use_cgroups = false;
  auto runtime = Runtime::create(options);
  ASSERT_TRUE(runtime) << runtime.error().to_string();
  EXPECT_FALSE((*runtime)->capabilities().checkpoint);
  EXPECT_THAT((*runtime)->capabilities().checkpoint_reason, HasSubstr("namespace"));
}

TEST(CheckpointImages, ADirectoryWithoutCriusFileTableIsRefused) {
  TempDir dir;
  auto none = rewrite_checkpoint_paths(dir.path(), "/a", "/b");
  ASSERT_FALSE(none);
  EXPECT_THAT(none.error().message, HasSubstr("files.img"));
}

}  // namespace
}  // namespace cnlab::agent
