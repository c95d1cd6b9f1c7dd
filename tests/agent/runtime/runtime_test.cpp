// Real jobs through the real shim with everything the machine allows: cgroups, namespaces and
// switching user (the privileged path). Needs root; each test skips with the reason otherwise.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "agent/runtime/runtime.h"
#include "test_support.h"

namespace cnlab::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using namespace testing;
namespace fs = std::filesystem;

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "the privileged path (cgroups, namespaces, run-as) needs root; CI runs as root. "
                      "Without root, FallbackTest covers the unprivileged path";
    }
    auto runtime = Runtime::create(test_options());
    ASSERT_TRUE(runtime) << runtime.error().to_string();
    runtime_ = std::move(*runtime);
  }
  void TearDown() override {
    EXPECT_TRUE(no_children_left()) << "a shim outlived its job";
    if (runtime_) {
      EXPECT_TRUE(runtime_->remove_cgroup_parent());
    }
  }
  void need_cgroups() {
    if (runtime_->capabilities().cgroups == CgroupVersion::kNone) {
      GTEST_SKIP() << "this machine gives no cgroups (" << runtime_->capabilities().cgroups_reason
                   << "); FallbackTest covers running and stopping without them";
    }
  }
  void need_namespaces() {
    if (!runtime_->capabilities().namespaces) {
      GTEST_SKIP() << "no namespaces here: " << runtime_->capabilities().namespaces_reason;
    }
  }
  fs::path job_dir(const std::string& name = "job") { return dir_.path() / name; }
  JobHandle start(const ProcessSpec& spec) {
    auto job = runtime_->start(spec);
    EXPECT_TRUE(job) << job.error().to_string();
    if (!job) throw std::runtime_error("start failed");  // ends the test; gtest reports it
    return *job;
  }
  // The job's cgroup directory in one v1 hierarchy.
  fs::path v1_dir(const std::string& controller, const ProcessSpec& spec) {
    return fs::path("/sys/fs/cgroup") / controller / test_options().cgroup_parent / cgroup_name_for(spec.job_id);
  }

  TempDir dir_;
  std::unique_ptr<Runtime> runtime_;
};

TEST_F(RuntimeTest, DetectsCgroupsAndNamespacesOnThisMachine) {
  const auto& caps = runtime_->capabilities();
  // The build machine and CI: root, cgroup v1 (the unified mount has no controllers), namespaces.
  EXPECT_NE(caps.cgroups, CgroupVersion::kNone) << caps.cgroups_reason;
  EXPECT_TRUE(caps.memory_limit);
  EXPECT_TRUE(caps.tree_kill);
  EXPECT_TRUE(caps.namespaces) << caps.namespaces_reason;
  EXPECT_TRUE(caps.job_view) << caps.job_view_reason;
  EXPECT_TRUE(fs::is_directory(kJobViewRoot));
  EXPECT_TRUE(caps.switch_user);
}

TEST_F(RuntimeTest, LinesComeBackWithTheirStreamsAndConsecutiveSequenceNumbers) {
  auto job = start(shell_job(job_dir(), "echo one; echo two >&2; echo three; echo four >&2"));
  const auto lines = collect(job);
  ASSERT_EQ(lines.size(), 4u);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i].seq, i + 1);
  EXPECT_THAT(texts(lines, OutputStream::kStdout), ElementsAre("one", "three"));
  EXPECT_THAT(texts(lines, OutputStream::kStderr), ElementsAre("two", "four"));
  const auto status = job.status();
  EXPECT_EQ(status.state, JobState::kExited);
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_TRUE(status.finished_at.has_value());
}

TEST_F(RuntimeTest, LinesOfBothStreamsKeepTheOrderTheyWerePrintedIn) {
  auto job = start(shell_job(job_dir(), "echo a; sleep 0.1; echo b >&2; sleep 0.1; echo c"));
  const auto lines = collect(job);
  EXPECT_THAT(texts(lines), ElementsAre("a", "b", "c"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1].stream, OutputStream::kStderr);
  EXPECT_LE(lines[0].time, lines[2].time);
}

TEST_F(RuntimeTest, NonZeroExitCodeIsReported) {
  auto job = start(shell_job(job_dir(), "exit 3"));
  const auto status = job.wait(10s);
  EXPECT_EQ(status.state, JobState::kExited);
  EXPECT_EQ(status.exit_code, 3);
  EXPECT_FALSE(status.signal.has_value());
  EXPECT_FALSE(status.oom_killed);
}

TEST_F(RuntimeTest, DeathBySignalIsReported) {
  auto job = start(shell_job(job_dir(), "kill -KILL $$"));
  const auto status = job.wait(10s);
  EXPECT_EQ(status.state, JobState::kExited);
  EXPECT_EQ(status.signal, SIGKILL);
  EXPECT_FALSE(status.exit_code.has_value());
  EXPECT_FALSE(status.oom_killed);
  EXPECT_FALSE(status.stopped);
}

TEST_F(RuntimeTest, SignalIsForwardedByTheInitToTheCommand) {
  auto job = start(shell_job(job_dir(), "exec sleep 30"));
  ASSERT_TRUE(job.signal(SIGINT));
  const auto status = job.wait(10s);
  EXPECT_EQ(status.state, JobState::kExited);
  EXPECT_EQ(status.signal, SIGINT);
}

TEST_F(RuntimeTest, CheckpointSignalReachesTheJobsHandler) {
  ProcessSpec spec = shell_job(job_dir(), "");
  spec.argv = {"python3", "-c",
               "import signal, sys, time\n"
               "def saved(*_):\n"
               "    print('checkpoint saved', flush=True)\n"
               "    sys.exit(0)\n"
               "signal.signal(signal.SIGUSR1, saved)\n"
               "print('ready', flush=True)\n"
               "time.sleep(30)\n"};
  auto job = start(spec);
  auto reader = OutputReader::open(job.output_path());
  ASSERT_TRUE(reader);
  auto seen = read_until_text(*reader, "ready");
  ASSERT_THAT(texts(seen), ElementsAre("ready"));
  ASSERT_TRUE(job.send_checkpoint_signal());
  const auto rest = collect(job, *reader);
  EXPECT_THAT(texts(rest), ElementsAre("checkpoint saved"));
  EXPECT_EQ(job.status().exit_code, 0);
}

TEST_F(RuntimeTest, MemoryBytesCountsWhatTheJobsTreeHoldsAndIsRefusedOnceItEnded) {
  // A child holding 96 MiB and its parent 32 MiB, both written (so resident), then waiting.
  ProcessSpec spec = shell_job(job_dir(), "");
  spec.argv = {"python3", "-c",
               "import os, time\n"
               "held = bytearray(os.urandom(1)) * (32 << 20)\n"
               "if os.fork() == 0:\n"
               "    more = bytearray(b'x') * (96 << 20)\n"
               "    print('child ready', flush=True)\n"
               "    time.sleep(30)\n"
               "    os._exit(0)\n"
               "time.sleep(30)\n"};
  auto job = start(spec);
  auto reader = OutputReader::open(job.output_path());
  ASSERT_TRUE(reader);
  ASSERT_THAT(texts(read_until_text(*reader, "child ready")), ElementsAre("child ready"));
  auto bytes = job.memory_bytes();
  ASSERT_TRUE(bytes) << bytes.error().to_string();
  EXPECT_GE(*bytes, int64_t{128} << 20) << "the parent's 32 MiB and the child's 96 MiB";
  EXPECT_LT(*bytes, int64_t{512} << 20) << "no more than the tree holds";
  ASSERT_TRUE(job.stop(0ms));
  EXPECT_FALSE(job.memory_bytes());
}

TEST_F(RuntimeTest, CheckpointSignalGoesPastAWrapperToTheProgramThatHandlesItAndNotToItsWorkers) {
  expect_checkpoint_signal_passes_the_wrapper(start(checkpoint_signal_job(job_dir())));
}

TEST_F(RuntimeTest, CheckpointSignalIsNotSentToAJobThatDoesNotHandleIt) {
  expect_checkpoint_signal_not_sent_without_a_handler(start(shell_job(job_dir(), "sleep 30; echo slept")));
}

TEST_F(RuntimeTest, StopKillsATreeIgnoringSigtermAfterTheGraceAndLeavesNothing) {
  need_cgroups();
  const ProcessSpec spec = shell_job(job_dir(),
                                     "trap '' TERM; (trap '' TERM; sleep 300) & sh -c \"trap '' TERM; sleep 300\" & "
                                     "echo started; wait");
  auto job = start(spec);
  auto reader = OutputReader::open(job.output_path());
  ASSERT_TRUE(reader);
  ASSERT_THAT(texts(read_until_text(*reader, "started")), ElementsAre("started"));
  const auto tree = descendants(job.shim_pid());
  ASSERT_GE(tree.size(), 4u);  // init, sh, the subshell and sh -c, their sleeps

  const auto before = std::chrono::steady_clock::now();
  auto stopped = job.stop(300ms);
  ASSERT_TRUE(stopped) << stopped.error().to_string();
  EXPECT_GE(std::chrono::steady_clock::now() - before, 300ms);
  EXPECT_EQ(stopped->state, JobState::kExited);
  EXPECT_EQ(stopped->signal, SIGKILL);
  EXPECT_TRUE(stopped->stopped);
  EXPECT_FALSE(stopped->oom_killed);
  for (const auto& process : tree) EXPECT_FALSE(still_running(process)) << "pid " << process.pid << " survived";
  EXPECT_FALSE(fs::exists(v1_dir("freezer", spec)));
  EXPECT_FALSE(fs::exists(v1_dir("memory", spec)));
}

TEST_F(RuntimeTest, StopOfAJobThatHonoursSigtermNeedsNoKill) {
  auto job = start(shell_job(job_dir(), "exec sleep 30"));
  auto stopped = job.stop(5s);
  ASSERT_TRUE(stopped) << stopped.error().to_string();
  EXPECT_EQ(stopped->signal, SIGTERM);
  EXPECT_FALSE(stopped->stopped);
}

TEST_F(RuntimeTest, ExceedingTheMemoryLimitIsReportedAsAnOomKill) {
  need_cgroups();
  if (!runtime_->capabilities().memory_limit) {
    GTEST_SKIP() << "no memory controller here";
  }
  ProcessSpec spec = shell_job(job_dir(), "");
  spec.argv = {"python3", "-c", "x = b'a' * (200 << 20)\nprint('allocated', len(x))"};
  spec.limits.memory_bytes = 64 << 20;
  auto job = start(spec);
  const auto status = job.wait(20s);
  EXPECT_EQ(status.state, JobState::kExited);
  EXPECT_EQ(status.signal, SIGKILL);
  EXPECT_TRUE(status.oom_killed);
  EXPECT_GE(status.oom_kills, 1);
  EXPECT_TRUE(texts(collect(job)).empty());
}

TEST_F(RuntimeTest, PidsLimitStopsForksBeyondIt) {
  need_cgroups();
  if (!runtime_->capabilities().pids_limit) {
    GTEST_SKIP() << "no pids controller here";
  }
  ProcessSpec spec = shell_job(job_dir(), "");
  spec.argv = {"python3", "-c",
               "import os, time\n"
               "kids = []\n"
               "try:\n"
               "    for _ in range(20):\n"
               "        pid = os.fork()\n"
               "        if pid == 0:\n"
               "            time.sleep(30)\n"
               "            os._exit(0)\n"
               "        kids.append(pid)\n"
               "except OSError as e:\n"
               "    print('fork refused', e.errno, flush=True)\n"
               "print('forked', len(kids), flush=True)\n"};
  spec.limits.pids = 5;
  auto job = start(spec);
  const auto lines = collect(job);
  // Python itself is one of the five; the runtime's init is not counted.
  EXPECT_THAT(texts(lines), ElementsAre("fork refused 11", "forked 4"));
  EXPECT_EQ(job.status().exit_code, 0);
}

TEST_F(RuntimeTest, LimitsAreWrittenIntoTheJobsCgroup) {
  need_cgroups();
  ProcessSpec spec = shell_job(job_dir(), "exec sleep 30");
  spec.limits = {.cpu_milli = 500, .memory_bytes = 128 << 20, .pids = 10};
  auto job = start(spec);
  EXPECT_EQ(job.isolation().cgroups, runtime_->capabilities().cgroups);
  EXPECT_TRUE(job.isolation().cpu_limit);
  EXPECT_TRUE(job.isolation().memory_limit);
  EXPECT_TRUE(job.isolation().pids_limit);
  if (runtime_->capabilities().cgroups == CgroupVersion::kV1) {
    EXPECT_EQ(read_text(v1_dir("cpu", spec) / "cpu.cfs_quota_us"), "50000");
    EXPECT_EQ(read_text(v1_dir("memory", spec) / "memory.limit_in_bytes"), "134217728");
    if (job.isolation().swap_limit) {
      EXPECT_EQ(read_text(v1_dir("memory", spec) / "memory.memsw.limit_in_bytes"), "134217728");
    }
    EXPECT_EQ(read_text(v1_dir("pids", spec) / "pids.max"), "11");
    EXPECT_THAT(read_text(v1_dir("memory", spec) / "cgroup.procs"), ::testing::Not(::testing::IsEmpty()));
  }
  EXPECT_TRUE(job.stop(2s));
}

TEST_F(RuntimeTest, JobIsPid2OfItsOwnNamespacesWithItsOwnHostnameAndProc) {
  need_namespaces();
  ProcessSpec spec = shell_job(job_dir(),
                               "echo pid=$$; cat /proc/sys/kernel/hostname; cat /proc/1/comm; "
                               "readlink /proc/self/ns/pid /proc/self/ns/mnt /proc/self/ns/ipc /proc/self/ns/uts");
  spec.hostname = "job-host";
  auto job = start(spec);
  const auto lines = texts(collect(job));
  ASSERT_EQ(lines.size(), 7u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0], "pid=2");
  EXPECT_EQ(lines[1], "job-host");
  EXPECT_EQ(lines[2], "cnlab_test_shim");  // the init: a copy of the shim, PID 1 in the fresh /proc
  const char* kinds[] = {"pid", "mnt", "ipc", "uts"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NE(lines[3 + i], fs::read_symlink(fmt::format("/proc/self/ns/{}", kinds[i])).string()) << kinds[i];
  }
}

TEST_F(RuntimeTest, EnvironmentIsExactlyWhatWasGiven) {
  ProcessSpec spec = shell_job(job_dir(), "");
  spec.argv = {"/usr/bin/env"};
  spec.env = {"A=1", "B=two words"};
  auto job = start(spec);
  EXPECT_THAT(texts(collect(job)), ElementsAre("A=1", "B=two words"));
}

TEST_F(RuntimeTest, WorkingDirectoryIsApplied) {
  ProcessSpec spec = shell_job(job_dir(), "pwd");
  spec.working_dir = (dir_.path() / "work").string();
  fs::create_directories(spec.working_dir);
  auto job = start(spec);
  EXPECT_THAT(texts(collect(job)), ElementsAre(fs::canonical(spec.working_dir).string()));
}

// Two jobs given the same view paths each see their own directory there, and the host's mount
// point stays as it was: the binds live in each job's mount namespace.
TEST_F(RuntimeTest, ViewMountsShowEachJobItsOwnDirectoryAtTheSamePath) {
  need_namespaces();
  const std::string view = std::string(kJobViewRoot) + "/work";
  std::vector<JobHandle> jobs;
  for (const std::string& name : {std::string("a"), std::string("b")}) {
    const fs::path work = dir_.path() / ("work-" + name);
    fs::create_directories(work);
    { std::ofstream(work / "whose.txt") << name << "\n"; }
    ProcessSpec spec = shell_job(job_dir(name), "pwd; cat whose.txt; echo written > made.txt");
    spec.view_mounts = {{work, view}};
    spec.working_dir = view;
    jobs.push_back(start(spec));
  }
  EXPECT_THAT(texts(collect(jobs[0])), ElementsAre(view, "a"));
  EXPECT_THAT(texts(collect(jobs[1])), ElementsAre(view, "b"));
  EXPECT_EQ(read_text(dir_.path() / "work-a" / "made.txt"), "written");
  EXPECT_EQ(read_text(dir_.path() / "work-b" / "made.txt"), "written");
  EXPECT_TRUE(fs::is_directory(view)) << "the runtime makes the mount point";
  EXPECT_FALSE(fs::exists(fs::path(view) / "made.txt")) << "the host's mount point is untouched";
}

TEST_F(RuntimeTest, ProgramThatCannotBeExecutedIsAnErrorNamingArgv0) {
  ProcessSpec spec = shell_job(job_dir("a"), "");
  spec.argv = {"/nonexistent/program"};
  auto job = runtime_->start(spec);
  ASSERT_FALSE(job);
  EXPECT_EQ(job.error().field, "argv[0]");
  EXPECT_EQ(job.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(job.error().message, HasSubstr("No such file or directory"));
  // It is recorded as the job's end too, for an agent that adopts the directory later.
  auto adopted = runtime_->adopt(job_dir("a"));
  ASSERT_TRUE(adopted) << adopted.error().to_string();
  EXPECT_EQ(adopted->status().exit_code, 127);

  spec.job_dir = job_dir("b");
  spec.argv = {"no-such-program-on-path"};
  auto missing = runtime_->start(spec);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().field, "argv[0]");
}

TEST_F(RuntimeTest, BadSpecFieldsAreNamed) {
  ProcessSpec spec = shell_job(job_dir(), "true");
  spec.env = {"NOEQUALS"};
  EXPECT_EQ(runtime_->start(spec).error().field, "env[0]");
  spec = shell_job(job_dir(), "true");
  spec.limits.memory_bytes = -1;
  EXPECT_EQ(runtime_->start(spec).error().field, "limits.memory_bytes");
  spec = shell_job("relative/dir", "true");
  EXPECT_EQ(runtime_->start(spec).error().field, "job_dir");
  spec = shell_job(job_dir(), "true");
  spec.run_as.user = "no-such-user-cnlab";
  EXPECT_EQ(runtime_->start(spec).error().field, "run_as.user");
  // A view mount binds only under kJobViewRoot, from an absolute path.
  const std::string root(kJobViewRoot);
  for (const std::string& view : {std::string("/etc"), root, root + "/../x", root + "/a/../../x", std::string("run/x")}) {
    spec = shell_job(job_dir(), "true");
    spec.view_mounts = {{dir_.path(), view}};
    auto refused = runtime_->start(spec);
    ASSERT_FALSE(refused) << view;
    EXPECT_EQ(refused.error().field, "view_mounts[0].view") << view;
    EXPECT_THAT(refused.error().message, HasSubstr("a path under " + root)) << view;
  }
  spec = shell_job(job_dir(), "true");
  spec.view_mounts = {{"relative", root + "/work"}};
  EXPECT_EQ(runtime_->start(spec).error().field, "view_mounts[0].source");
}

TEST_F(RuntimeTest, DirectoryHoldingAnEarlierRunIsRefused) {
  auto first = start(shell_job(job_dir(), "true"));
  first.wait(10s);
  auto second = runtime_->start(shell_job(job_dir(), "true"));
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(second.error().field, "job_dir");
}

TEST_F(RuntimeTest, AdoptAfterAgentRestartContinuesOutputWithNoLineLostOrDoubled) {
  const fs::path go = dir_.path() / "go";
  const ProcessSpec spec = shell_job(job_dir(), fmt::format("for i in 1 2 3 4 5; do echo line$i; done; "
                                                            "while [ ! -e {} ]; do sleep 0.02; done; "
                                                            "for i in 6 7 8 9 10; do echo line$i; done; exit 7",
                                                            go.string()));
  OutputCursor saved;
  pid_t shim = 0;
  {
    // The agent before its restart: reads three lines, persists the cursor, and dies.
    auto runtime = Runtime::create(test_options());
    ASSERT_TRUE(runtime);
    auto job = (*runtime)->start(spec);
    ASSERT_TRUE(job) << job.error().to_string();
    shim = job->shim_pid();
    auto reader = OutputReader::open(job->output_path());
    ASSERT_TRUE(reader);
    std::vector<OutputLine> first;
    while (first.size() < 3) {
      auto batch = reader->read(3 - first.size());
      ASSERT_TRUE(batch);
      for (auto& line : *batch) first.push_back(line);
      if (first.size() < 3) reader->wait(1s);
    }
    EXPECT_THAT(texts(first), ElementsAre("line1", "line2", "line3"));
    saved = first.back().cursor;
  }
  // The new agent.
  auto runtime = Runtime::create(test_options());
  ASSERT_TRUE(runtime);
  auto job = (*runtime)->adopt(job_dir());
  ASSERT_TRUE(job) << job.error().to_string();
  EXPECT_EQ(job->shim_pid(), shim);
  EXPECT_EQ(job->status().state, JobState::kRunning);
  std::ofstream(go.string()) << "go";
  auto reader = OutputReader::open(job->output_path(), saved);
  ASSERT_TRUE(reader) << reader.error().to_string();
  const auto rest = collect(*job, *reader);
  EXPECT_THAT(texts(rest), ElementsAre("line4", "line5", "line6", "line7", "line8", "line9", "line10"));
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.front().seq, 4u);
  EXPECT_EQ(rest.back().seq, 10u);
  EXPECT_EQ(job->status().exit_code, 7);
}

TEST_F(RuntimeTest, HundredThousandLinesInABurstArriveCompleteAndInOrder) {
  ProcessSpec spec = shell_job(job_dir(), "");
  spec.argv = {"python3", "-c", "import sys\nsys.stdout.write(''.join('line %d\\n' % i for i in range(100000)))"};
  auto job = start(spec);
  const auto lines = collect(job, 20s);
  ASSERT_EQ(lines.size(), 100000u);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].seq != i + 1 || lines[i].text != "line " + std::to_string(i)) {
      FAIL() << "record " << i << " is seq " << lines[i].seq << " \"" << lines[i].text << "\"";
    }
  }
}

TEST_F(RuntimeTest, OutputIsVisibleWhileTheJobRunsNotOnlyAtItsEnd) {
  auto job = start(shell_job(job_dir(), "echo early; exec sleep 30"));
  auto reader = OutputReader::open(job.output_path());
  ASSERT_TRUE(reader);
  const auto lines = read_until_text(*reader, "early", 5s);
  ASSERT_THAT(texts(lines), ElementsAre("early"));
  EXPECT_EQ(job.status().state, JobState::kRunning);
  EXPECT_TRUE(job.stop(2s));
}

TEST_F(RuntimeTest, LongLinesAreSplitAndALastLineWithoutNewlineIsKept) {
  ProcessSpec spec = shell_job(job_dir(), "");
  spec.argv = {"python3", "-c", "import sys\nsys.stdout.write('x' * (150 * 1024) + '\\n' + 'tail')"};
  auto job = start(spec);
  const auto lines = collect(job);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(lines[0].partial);
  EXPECT_EQ(lines[0].text.size(), 64u * 1024);
  EXPECT_TRUE(lines[1].partial);
  EXPECT_FALSE(lines[2].partial);
  EXPECT_EQ(lines[0].text.size() + lines[1].text.size() + lines[2].text.size(), 150u * 1024);
  EXPECT_EQ(lines[3].text, "tail");
  EXPECT_FALSE(lines[3].partial);
}

TEST_F(RuntimeTest, InvalidUtf8IsReplacedWithoutBreakingRecords) {
  auto job = start(shell_job(job_dir(), "printf '\\377ok\\n\\000nul\\n'"));
  EXPECT_THAT(texts(collect(job)), ElementsAre("\xEF\xBF\xBDok", std::string("\0nul", 4)));
}

TEST_F(RuntimeTest, UnfinishedLineIsWrittenAsPartialAfterASecond) {
  auto job = start(shell_job(job_dir(), "printf 'progress'; sleep 1.5; echo ' done'"));
  auto reader = OutputReader::open(job.output_path());
  ASSERT_TRUE(reader);
  const auto first = read_until_text(*reader, "progress", 5s);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(first[0].partial);
  EXPECT_EQ(job.status().state, JobState::kRunning);
  const auto rest = collect(job, *reader);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].text, " done");
  EXPECT_FALSE(rest[0].partial);
}

TEST_F(RuntimeTest, RunAsNobodyWritesIntoItsJobDirectory) {
  ProcessSpec spec = shell_job(job_dir(), "id -u; id -g; echo hi > written.txt; cat written.txt");
  spec.run_as.uid = 65534;
  auto job = start(spec);
  EXPECT_THAT(texts(collect(job)), ElementsAre("65534", "65534", "hi"));
  EXPECT_EQ(job.status().exit_code, 0);
  struct stat written {};
  ASSERT_EQ(::stat((job_dir() / "written.txt").c_str(), &written), 0);
  EXPECT_EQ(written.st_uid, 65534u);
  struct stat dir {};
  ASSERT_EQ(::stat(job_dir().c_str(), &dir), 0);
  EXPECT_EQ(dir.st_mode & 07777, 01770u);  // sticky: the job cannot touch the runtime's files
  EXPECT_EQ(dir.st_gid, 65534u);
  EXPECT_TRUE(job.isolation().switch_user);
}

TEST_F(RuntimeTest, ExitFilePlantedByTheJobIsNotBelieved) {
  ProcessSpec spec = shell_job(job_dir(), "echo '{\"exit_code\": 0}' > exit.json && echo planted; exec sleep 30");
  spec.run_as.uid = 65534;
  auto job = start(spec);
  auto reader = OutputReader::open(job.output_path());
  ASSERT_TRUE(reader);
  // The name was free, so the job could create it; but the file is not the runtime's.
  ASSERT_THAT(texts(read_until_text(*reader, "planted")), ElementsAre("planted"));
  EXPECT_EQ(job.status().state, JobState::kRunning);
  auto stopped = job.stop(2s);
  ASSERT_TRUE(stopped) << stopped.error().to_string();
  EXPECT_EQ(stopped->signal, SIGTERM);
}

TEST_F(RuntimeTest, KilledShimMakesTheJobLostAndStopStillKillsItsProcesses) {
  need_cgroups();
  auto job = start(shell_job(job_dir(), "trap '' TERM; sleep 300"));
  const auto tree = descendants(job.shim_pid());
  ASSERT_FALSE(tree.empty());
  ASSERT_EQ(::kill(job.shim_pid(), SIGKILL), 0);
  const auto lost = job.wait(5s);
  EXPECT_EQ(lost.state, JobState::kLost);
  EXPECT_THAT(lost.error, HasSubstr("gone"));
  EXPECT_FALSE(job.signal(SIGTERM));
  auto stopped = job.stop(100ms);
  ASSERT_TRUE(stopped) << stopped.error().to_string();
  EXPECT_EQ(stopped->state, JobState::kLost);
  // SIGKILLed processes leave /proc a moment later on a loaded machine; none may stay.
  for (const auto& process : tree) {
    auto deadline = std::chrono::steady_clock::now() + 3s;
    while (still_running(process) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    EXPECT_FALSE(still_running(process)) << "pid " << process.pid << " survived";
  }
}

TEST_F(RuntimeTest, SignalToAFinishedJobIsRefused) {
  auto job = start(shell_job(job_dir(), "true"));
  ASSERT_EQ(job.wait(10s).state, JobState::kExited);
  const auto refused = job.signal(SIGTERM);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(job.signal(0).error().field, "signal");
}

TEST(CgroupName, IsSafeAndDistinctForIdsThatSanitiseAlike) {
  EXPECT_EQ(cgroup_name_for("train-7f3a"), "train-7f3a");
  const std::string a = cgroup_name_for("team/job 1");
  const std::string b = cgroup_name_for("team_job_1");
  EXPECT_NE(a, b);
  EXPECT_THAT(a, ::testing::StartsWith("team_job_1-"));
  EXPECT_EQ(cgroup_name_for("..").front(), '_');
  EXPECT_LE(cgroup_name_for(std::string(300, 'x')).size(), 64u);
  EXPECT_NE(cgroup_name_for(std::string(300, 'x')), cgroup_name_for(std::string(301, 'x')));
}

}  // namespace
}  // namespace cnlab::agent
