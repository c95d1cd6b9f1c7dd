// The unprivileged fallback: no cgroups and no namespaces, the job in its own session and process
// group. Forced by options (runs as any user), and for real as uid 65534 (needs root to get there).
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "agent/runtime/runtime.h"
#include "test_support.h"

namespace cnlab::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
using namespace testing;
namespace fs = std::filesystem;

RuntimeOptions fallback_options() {
  RuntimeOptions options = test_options();
  options.use_cgroups = false;
  options.use_namespaces = false;
  return options;
}

class FallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto runtime = Runtime::create(fallback_options());
    ASSERT_TRUE(runtime) << runtime.error().to_string();
    runtime_ = std::move(*runtime);
  }
  void TearDown() override { EXPECT_TRUE(no_children_left()) << "a shim outlived its job"; }
  fs::path job_dir(const std::string& name = "job") { return dir_.path() / name; }
  JobHandle start(const ProcessSpec& spec) {
    auto job = runtime_->start(spec);
    EXPECT_TRUE(job) << job.error().to_string();
    if (!job) throw std::runtime_error("start failed");
    return *job;
  }

  TempDir dir_;
  std::unique_ptr<Runtime> runtime_;
};

TEST_F(FallbackTest, CapabilitiesSayWhatIsOffAndWhy) {
  const auto& caps = runtime_->capabilities();
  EXPECT_EQ(caps.cgroups, CgroupVersion::kNone);
  EXPECT_FALSE(caps.memory_limit || caps.cpu_limit || caps.pids_limit || caps.tree_kill);
  EXPECT_FALSE(caps.namespaces);
  EXPECT_FALSE(caps.job_view);
  EXPECT_THAT(caps.cgroups_reason, HasSubstr("disabled"));
  EXPECT_THAT(caps.namespaces_reason, HasSubstr("disabled"));
  EXPECT_THAT(caps.job_view_reason, HasSubstr("no mount namespace"));
}

TEST_F(FallbackTest, LinesStreamsAndExitCodeComeBack) {
  ProcessSpec spec = shell_job(job_dir(), "echo out; echo err >&2; exit 5");
  spec.limits.memory_bytes = 64 << 20;  // asked for, but not possible here: the job still runs
  auto job = start(spec);
  const auto lines = collect(job);
  EXPECT_THAT(texts(lines, OutputStream::kStdout), ElementsAre("out"));
  EXPECT_THAT(texts(lines, OutputStream::kStderr), ElementsAre("err"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].seq, 2u);
  EXPECT_EQ(job.status().exit_code, 5);
  EXPECT_EQ(job.isolation().cgroups, CgroupVersion::kNone);
  EXPECT_FALSE(job.isolation().memory_limit);
}

TEST_F(FallbackTest, SignalGoesToTheCommand) {
  auto job = start(shell_job(job_dir(), "exec sleep 30"));
  ASSERT_TRUE(job.signal(SIGINT));
  const auto status = job.wait(10s);
  EXPECT_EQ(status.state, JobState::kExited);
  EXPECT_EQ(status.signal, SIGINT);
}

TEST_F(FallbackTest, CheckpointSignalGoesPastAWrapperToTheProgramThatHandlesItAndNotToItsWorkers) {
  expect_checkpoint_signal_passes_the_wrapper(start(checkpoint_signal_job(job_dir())));
}

TEST_F(FallbackTest, CheckpointSignalIsNotSentToAJobThatDoesNotHandleIt) {
  expect_checkpoint_signal_not_sent_without_a_handler(start(shell_job(job_dir(), "sleep 30; echo slept")));
}

TEST_F(FallbackTest, StopKillsTheProcessGroupAfterTheGrace) {
  auto job = start(shell_job(job_dir(), "trap '' TERM; (trap '' TERM; sleep 300) & echo started; wait"));
  auto reader = OutputReader::open(job.output_path());
  ASSERT_TRUE(reader);
  ASSERT_THAT(texts(read_until_text(*reader, "started")), ElementsAre("started"));
  const auto tree = descendants(job.shim_pid());
  ASSERT_GE(tree.size(), 2u);  // sh, and the subshell (which execs sleep)
  const auto before = std::chrono::steady_clock::now();
  auto stopped = job.stop(300ms);
  ASSERT_TRUE(stopped) << stopped.error().to_string();
  EXPECT_GE(std::chrono::steady_clock::now() - before, 300ms);
  EXPECT_EQ(stopped->signal, SIGKILL);
  EXPECT_TRUE(stopped->stopped);
  for (const auto& process : tree) EXPECT_FALSE(still_running(process)) << "pid " << process.pid << " survived";
}

TEST_F(FallbackTest, WhatTheCommandLeavesBehindIsKilledWhenItExits) {
  auto job = start(shell_job(job_dir(), "sleep 300 & echo $!"));
  const auto lines = texts(collect(job));
  ASSERT_EQ(lines.size(), 1u);
  const pid_t leftover = std::stoi(lines[0]);
  EXPECT_EQ(job.status().exit_code, 0);
  // Killed with the process group when sh exited, and reaped by the shim (its subreaper): gone.
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (::kill(leftover, 0) == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_NE(::kill(leftover, 0), 0);
}

TEST_F(FallbackTest, EnvironmentAndWorkingDirectoryAreApplied) {
  ProcessSpec spec = shell_job(job_dir(), "");
  spec.argv = {"/bin/sh", "-c", "pwd; echo \"$ONLY\"; env | wc -l"};
  spec.env = {"ONLY=this"};
  spec.working_dir = "/tmp";
  auto job = start(spec);
  // dash adds PWD (and nothing else) to what it was given.
  EXPECT_THAT(texts(collect(job)), ElementsAre("/tmp", "this", "2"));
}

// Without a mount namespace there is nowhere private to bind them: view mounts are not applied, and
// the job works in its node's own directory (the agent gives it those paths then).
TEST_F(FallbackTest, ViewMountsAreNotAppliedWithoutAMountNamespace) {
  const fs::path work = dir_.path() / "work";
  fs::create_directories(work);
  ProcessSpec spec = shell_job(job_dir(), "pwd; echo here > made.txt");
  spec.view_mounts = {{work, std::string(kJobViewRoot) + "/work"}};
  spec.working_dir = work.string();
  auto job = start(spec);
  EXPECT_THAT(texts(collect(job)), ElementsAre(fs::canonical(work).string()));
  EXPECT_EQ(read_text(work / "made.txt"), "here");
}

TEST_F(FallbackTest, AdoptAfterRestartGetsTheRestOfTheOutputAndTheExit) {
  const fs::path go = dir_.path() / "go";
  const ProcessSpec spec = shell_job(
      job_dir(), fmt::format("echo before; while [ ! -e {} ]; do sleep 0.02; done; echo after; exit 9", go.string()));
  OutputCursor saved;
  {
    auto runtime = Runtime::create(fallback_options());
    ASSERT_TRUE(runtime);
    auto job = (*runtime)->start(spec);
    ASSERT_TRUE(job) << job.error().to_string();
    auto reader = OutputReader::open(job->output_path());
    ASSERT_TRUE(reader);
    const auto first = read_until_text(*reader, "before");
    ASSERT_THAT(texts(first), ElementsAre("before"));
    saved = reader->cursor();
  }
  auto runtime = Runtime::create(fallback_options());
  ASSERT_TRUE(runtime);
  auto job = (*runtime)->adopt(job_dir());
  ASSERT_TRUE(job) << job.error().to_string();
  EXPECT_EQ(job->status().state, JobState::kRunning);
  std::ofstream(go.string()) << "go";
  auto reader = OutputReader::open(job->output_path(), saved);
  ASSERT_TRUE(reader);
  const auto rest = collect(*job, *reader);
  EXPECT_THAT(texts(rest), ElementsAre("after"));
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].seq, 2u);
  EXPECT_EQ(job->status().exit_code, 9);
}

TEST(FallbackLog, CgroupsUnavailableIsLoggedOnce) {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto logger = std::make_shared<spdlog::logger>("capture", sink);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  {
    TempDir dir;
    auto runtime = Runtime::create(fallback_options());
    ASSERT_TRUE(runtime);
    for (const char* name : {"a", "b"}) {
      auto job = (*runtime)->start(shell_job(dir.path() / name, "true"));
      ASSERT_TRUE(job) << job.error().to_string();
      job->wait(10s);
    }
  }
  spdlog::set_default_logger(previous);
  EXPECT_TRUE(no_children_left()) << "a shim outlived its job";
  const std::string log = captured.str();
  size_t count = 0;
  for (size_t at = log.find("runtime: cgroups unavailable"); at != std::string::npos;
       at = log.find("runtime: cgroups unavailable", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << log;
  EXPECT_THAT(log, HasSubstr("runtime: namespaces unavailable reason="));
}

// In a child that drops to uid 65534: what detection finds, and that a job still runs. Returns
// what went wrong, empty when all is well.
std::string run_as_nobody(const fs::path& base) {
  auto runtime = Runtime::create(test_options());  // asks for cgroups and namespaces
  if (!runtime) return "create: " + runtime.error().to_string();
  const auto& caps = (*runtime)->capabilities();
  if (caps.cgroups != CgroupVersion::kNone) return "cgroups detected for uid 65534";
  if (caps.cgroups_reason.find("Permission denied") == std::string::npos) {
    return "cgroups reason: " + caps.cgroups_reason;
  }
  if (caps.namespaces) return "namespaces detected for uid 65534";
  if (caps.namespaces_reason.find("unshare") == std::string::npos)
    return "namespaces reason: " + caps.namespaces_reason;
  if (caps.switch_user) return "switch_user for uid 65534";

  ProcessSpec spec = shell_job(base / "job", "echo hello; echo oops >&2; echo file > here.txt; exit 4");
  spec.limits = {.cpu_milli = 500, .memory_bytes = 64 << 20, .pids = 10};
  auto job = (*runtime)->start(spec);
  if (!job) return "start: " + job.error().to_string();
  const auto lines = collect(*job);
  if (texts(lines, OutputStream::kStdout) != std::vector<std::string>{"hello"}) return "stdout differs";
  if (texts(lines, OutputStream::kStderr) != std::vector<std::string>{"oops"}) return "stderr differs";
  if (job->status().exit_code != 4) return "exit code differs";
  if (!fs::exists(base / "job" / "here.txt")) return "the job could not write into its directory";
  int status = 0;
  ::waitpid(job->shim_pid(), &status, 0);

  ProcessSpec as_root = shell_job(base / "root-job", "true");
  as_root.run_as.uid = 0;
  auto refused = (*runtime)->start(as_root);
  if (refused) return "running as root was not refused";
  if (refused.error().field != "run_as") return "refusal names " + refused.error().field;
  return "";
}

TEST(Unprivileged, DetectionDegradesAndJobsStillRunAsUid65534) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root to drop to uid 65534 (CI runs as root); as a non-root user this whole "
                    "binary already runs unprivileged, which is what this test recreates";
  }
  TempDir dir;
  const fs::path base = dir.path() / "nobody";
  fs::create_directories(base);
  ASSERT_EQ(::chown(base.c_str(), 65534, 65534), 0);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string problem;
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) {
      problem = "cannot drop to uid 65534";
    } else {
      problem = run_as_nobody(base);
    }
    (void)!::write(pipe_fds[1], problem.data(), problem.size());
    ::_exit(problem.empty() ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string problem;
  char buffer[512];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0) problem.append(buffer, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(problem, "");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child crashed or failed: status " << status;
}

}  // namespace
}  // namespace cnlab::agent
