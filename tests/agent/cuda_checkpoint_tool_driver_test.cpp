// cnlab-cuda-checkpoint run as the agent runs it, on a real process (a `sleep` in a fresh
// directory), against the driver TEST DOUBLE (tests/fakes/fake_cuda_checkpoint.cpp: libcuda.so.1's
// checkpoint API over the files `.fake-cuda-context.<pid>`, `.fake-cuda-state.<pid>` and
// `.fake-cuda-actions` in the process's directory) found through LD_LIBRARY_PATH; and against a
// driver without the API, and none. Also: the tool's own declarations of the driver API
// (driver_api.h) are checked here against the real cuda.h, field by field.
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/cuda_checkpoint_tool/driver_api.h"

namespace cnlab::cuda_checkpoint_tool {
namespace {

// -- the tool's declarations are cuda.h's ---------------------------------------------------------

#define SAME_LAYOUT(type) static_assert(sizeof(cu::type) == sizeof(::type) && alignof(cu::type) == alignof(::type), #type)
#define SAME_FIELD(type, field) static_assert(offsetof(cu::type, field) == offsetof(::type, field), #type "." #field)
SAME_LAYOUT(CUuuid);
SAME_LAYOUT(CUprocessState);
SAME_LAYOUT(CUcheckpointLockArgs);
SAME_FIELD(CUcheckpointLockArgs, timeoutMs);
SAME_FIELD(CUcheckpointLockArgs, reserved0);
SAME_FIELD(CUcheckpointLockArgs, reserved1);
SAME_LAYOUT(CUcheckpointCheckpointArgs);
SAME_LAYOUT(CUcheckpointGpuPair);
SAME_FIELD(CUcheckpointGpuPair, oldUuid);
SAME_FIELD(CUcheckpointGpuPair, newUuid);
SAME_LAYOUT(CUcheckpointRestoreArgs);
SAME_FIELD(CUcheckpointRestoreArgs, gpuPairs);
SAME_FIELD(CUcheckpointRestoreArgs, gpuPairsCount);
SAME_FIELD(CUcheckpointRestoreArgs, reserved);
SAME_FIELD(CUcheckpointRestoreArgs, reserved1);
SAME_LAYOUT(CUcheckpointUnlockArgs);
#undef SAME_LAYOUT
#undef SAME_FIELD
static_assert(sizeof(cu::CUresult) == sizeof(::CUresult) && cu::CUDA_SUCCESS == ::CUDA_SUCCESS);
static_assert(cu::CU_PROCESS_STATE_RUNNING == static_cast<int>(::CU_PROCESS_STATE_RUNNING) &&
              cu::CU_PROCESS_STATE_LOCKED == static_cast<int>(::CU_PROCESS_STATE_LOCKED) &&
              cu::CU_PROCESS_STATE_CHECKPOINTED == static_cast<int>(::CU_PROCESS_STATE_CHECKPOINTED) &&
              cu::CU_PROCESS_STATE_FAILED == static_cast<int>(::CU_PROCESS_STATE_FAILED));

// Two function pointer types pass the same arguments: as many, each of the same size, pointers
// where the other's are, to objects of the same size.
template <typename A, typename B>
struct SameCall : std::false_type {};
template <typename R1, typename... A, typename R2, typename... B>
  requires(sizeof...(A) == sizeof...(B))
struct SameCall<R1 (*)(A...), R2 (*)(B...)> {
  template <typename X, typename Y>
  static constexpr bool same() {
    if constexpr (std::is_pointer_v<X> != std::is_pointer_v<Y>) {
      return false;
    } else if constexpr (std::is_pointer_v<X>) {
      return sizeof(std::remove_pointer_t<X>) == sizeof(std::remove_pointer_t<Y>);
    } else {
      return sizeof(X) == sizeof(Y);
    }
  }
  static constexpr bool value = same<R1, R2>() && (same<A, B>() && ...);
};
static_assert(SameCall<cu::PFN_cuInit, PFN_cuInit_v2000>::value);
static_assert(SameCall<cu::PFN_cuGetErrorName, PFN_cuGetErrorName_v6000>::value);
static_assert(SameCall<cu::PFN_cuGetErrorString, PFN_cuGetErrorString_v6000>::value);
static_assert(SameCall<cu::PFN_cuCheckpointProcessGetState, PFN_cuCheckpointProcessGetState_v12080>::value);
static_assert(SameCall<cu::PFN_cuCheckpointProcessLock, PFN_cuCheckpointProcessLock_v12080>::value);
static_assert(SameCall<cu::PFN_cuCheckpointProcessCheckpoint, PFN_cuCheckpointProcessCheckpoint_v12080>::value);
static_assert(SameCall<cu::PFN_cuCheckpointProcessRestore, PFN_cuCheckpointProcessRestore_v12080>::value);
static_assert(SameCall<cu::PFN_cuCheckpointProcessUnlock, PFN_cuCheckpointProcessUnlock_v12080>::value);

// -- running the tool -----------------------------------------------------------------------------

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* kGpuA = "GPU-3f1c0a2b-9d4e-4c1a-8e7f-0123456789ab";
constexpr const char* kGpuB = "GPU-fa4ec0da-c0de-4000-8000-000000000001";

struct Ran {
  int exit_code = -1;  // -1: killed at the deadline, or by a signal
  std::string out, err;
  std::chrono::milliseconds took{0};
};

// Runs `program` with exactly `env` (as the agent runs its utility: a bare environment), stdout and
// stderr apart; killed after `deadline`.
Ran run(const std::string& program, const std::vector<std::string>& args, const std::vector<std::string>& env,
        std::chrono::milliseconds deadline = 10s) {
  int out[2], err[2];
  if (::pipe(out) != 0 || ::pipe(err) != 0) return {};
  std::vector<std::string> argv_text = {program};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text = env;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::close(out[0]), ::close(out[1]), ::close(err[0]), ::close(err[1]);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  Ran ran;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* into[2] = {&ran.out, &ran.err};
  bool killed = false;
  for (int open = 2; open > 0;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(start + deadline - std::chrono::steady_clock::now());
    if (left <= 0ms) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        into[i]->append(buffer, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ran.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  if (!killed && WIFEXITED(status)) ran.exit_code = WEXITSTATUS(status);
  return ran;
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string describe(const Ran& ran) {
  return "exit " + std::to_string(ran.exit_code) + "\nstdout: " + ran.out + "\nstderr: " + ran.err;
}

// A fresh directory; in it `job/`, the working directory of a `sleep` that "holds a CUDA context"
// (its context file is there), and `state/`, the driver double's shared state (FAKE_CUDA_STATE_DIR).
class CudaCheckpointTool : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "cnlab-cuda-checkpoint-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    fs::create_directory(dir_ / "job");
    fs::create_directory(dir_ / "state");
    fs::create_directory(dir_ / "empty");
    pid_ = ::fork();
    if (pid_ == 0) {
      if (::chdir((dir_ / "job").c_str()) == 0) ::execlp("sleep", "sleep", "600", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ASSERT_GT(pid_, 0);
    pid_text_ = std::to_string(pid_);
    // Same PID namespace as this test: its pid there is its pid here.
    give_context("");
    // The child has changed directory once /proc/<pid>/cwd is the job's.
    for (auto until = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < until;) {
      std::error_code ec;
      if (fs::read_symlink("/proc/" + pid_text_ + "/cwd", ec) == dir_ / "job") break;
      ::usleep(1000);
    }
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // The context file, with the actions the double refuses (and `busy`).
  void give_context(const std::string& words) { std::ofstream(context_file()) << words; }
  fs::path context_file() const { return dir_ / "job" / (".fake-cuda-context." + pid_text_); }
  fs::path state_file() const { return dir_ / "job" / (".fake-cuda-state." + pid_text_); }
  std::vector<std::string> actions() const { return lines_of(dir_ / "job" / ".fake-cuda-actions"); }

  Ran tool(const std::vector<std::string>& args, const std::string& library_dir = FAKE_CUDA_DIR,
           std::chrono::milliseconds deadline = 10s) const {
    return run(CUDA_CHECKPOINT_TOOL, args,
               {"PATH=/usr/local/bin:/usr/bin:/bin", "LD_LIBRARY_PATH=" + library_dir,
                "FAKE_CUDA_STATE_DIR=" + (dir_ / "state").string()},
               deadline);
  }
  Ran action(const char* name, std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {"--action", name, "--pid", pid_text_};
    args.insert(args.end(), extra.begin(), extra.end());
    return tool(args);
  }
  // What --get-state prints, or "exit N: stderr" when it fails.
  std::string state() const {
    const Ran ran = tool({"--get-state", "--pid", pid_text_});
    return ran.exit_code == 0 ? ran.out : "exit " + std::to_string(ran.exit_code) + ": " + ran.err;
  }
  std::string line(const std::string& text) const { return pid_text_ + " " + text; }

  fs::path dir_;
  pid_t pid_ = -1;
  std::string pid_text_;
};

TEST_F(CudaCheckpointTool, GetStatePrintsOnlyTheStateWordOfARunningProcess) {
  const Ran ran = tool({"--get-state", "--pid", pid_text_});
  EXPECT_EQ(ran.exit_code, 0) << describe(ran);
  EXPECT_EQ(ran.out, "running\n");
  EXPECT_EQ(ran.err, "");
}

TEST_F(CudaCheckpointTool, ASuspendAndResumeTakeTheProcessThroughEveryStateAndTheMapReachesTheDriver) {
  Ran ran = action("lock", {"--timeout", "5000"});
  ASSERT_EQ(ran.exit_code, 0) << describe(ran);
  EXPECT_EQ(ran.out + ran.err, "");  // nothing printed when done
  EXPECT_EQ(state(), "locked\n");
  ran = action("checkpoint");
  ASSERT_EQ(ran.exit_code, 0) << describe(ran);
  EXPECT_EQ(state(), "checkpointed\n");
  // Upper-case hex reaches the driver as the same 16 bytes (the double writes them lower-case).
  ran = action("restore", {"--device-map", "GPU-3F1C0A2B-9D4E-4C1A-8E7F-0123456789AB=" + std::string(kGpuB) + "," + kGpuB + "=" + kGpuA});
  ASSERT_EQ(ran.exit_code, 0) << describe(ran);
  EXPECT_EQ(state(), "locked\n");
  ran = action("unlock");
  ASSERT_EQ(ran.exit_code, 0) << describe(ran);
  EXPECT_EQ(state(), "running\n");
  EXPECT_THAT(actions(), ElementsAre(line("lock"), line("checkpoint"),
                                     line("restore " + std::string(kGpuA) + "=" + kGpuB + "," + kGpuB + "=" + kGpuA),
                                     line("unlock")));
}

TEST_F(CudaCheckpointTool, ARestoreWithoutAMapStaysOnTheSameGpus) {
  ASSERT_EQ(action("lock").exit_code, 0);
  ASSERT_EQ(action("checkpoint").exit_code, 0);
  const Ran ran = action("restore");
  ASSERT_EQ(ran.exit_code, 0) << describe(ran);
  EXPECT_THAT(actions(), ElementsAre(line("lock"), line("checkpoint"), line("restore")));
}

TEST_F(CudaCheckpointTool, ToggleCheckpointsARunningProcessAndResumesACheckpointedOne) {
  Ran ran = tool({"--toggle", "--pid", pid_text_, "--timeout", "5000"});
  ASSERT_EQ(ran.exit_code, 0) << describe(ran);
  EXPECT_EQ(state(), "checkpointed\n");
  EXPECT_THAT(actions(), ElementsAre(line("lock"), line("checkpoint")));
  ran = tool({"--toggle", "--pid", pid_text_, "--device-map", std::string(kGpuA) + "=" + kGpuB});
  ASSERT_EQ(ran.exit_code, 0) << describe(ran);
  EXPECT_EQ(state(), "running\n");
  EXPECT_THAT(actions(), ElementsAre(line("lock"), line("checkpoint"), line("restore " + std::string(kGpuA) + "=" + kGpuB),
                                     line("unlock")));
}

TEST_F(CudaCheckpointTool, ToggleLeavesALockedProcessAloneAndSaysWhy) {
  ASSERT_EQ(action("lock").exit_code, 0);
  const Ran ran = tool({"--toggle", "--pid", pid_text_});
  EXPECT_EQ(ran.exit_code, 1) << describe(ran);
  EXPECT_THAT(ran.err, HasSubstr("cannot toggle process " + pid_text_ + ": its CUDA state is locked"));
  EXPECT_EQ(state(), "locked\n");
}

TEST_F(CudaCheckpointTool, ACheckpointRefusedDuringAToggleUnlocksTheProcessAgain) {
  give_context("checkpoint");
  const Ran ran = tool({"--toggle", "--pid", pid_text_});
  EXPECT_EQ(ran.exit_code, 1) << describe(ran);
  EXPECT_THAT(ran.err, AllOf(HasSubstr("could not checkpoint process " + pid_text_), HasSubstr("CUDA_ERROR_NOT_SUPPORTED"),
                             HasSubstr("unlocked it again")));
  EXPECT_EQ(state(), "running\n");
  EXPECT_THAT(actions(), ElementsAre(line("lock"), line("unlock")));
}

TEST_F(CudaCheckpointTool, AnIllegalActionFailsWithTheDriversErrorAndChangesNothing) {
  const Ran ran = action("unlock");
  EXPECT_EQ(ran.exit_code, 1) << describe(ran);
  EXPECT_EQ(ran.out, "");
  EXPECT_EQ(ran.err, "cnlab-cuda-checkpoint: could not unlock process " + pid_text_ +
                         ": cuCheckpointProcessUnlock returned CUDA_ERROR_ILLEGAL_STATE (the operation cannot be "
                         "performed in the present state)\n");
  EXPECT_EQ(state(), "running\n");
  EXPECT_THAT(actions(), IsEmpty());
}

TEST_F(CudaCheckpointTool, ALockPassesItsTimeoutAndOneThatRunsOutLeavesTheProcessRunning) {
  give_context("busy");  // the double's CUDA work in flight that never finishes
  const Ran ran = action("lock", {"--timeout", "300"});
  EXPECT_EQ(ran.exit_code, 1) << describe(ran);  // -1 (killed at 10 s): the timeout never reached the driver
  EXPECT_THAT(ran.err, AllOf(HasSubstr("could not lock process " + pid_text_), HasSubstr("CUDA_ERROR_NOT_READY")));
  EXPECT_GE(ran.took, 300ms);
  EXPECT_EQ(state(), "running\n");
  EXPECT_THAT(actions(), IsEmpty());
}

TEST_F(CudaCheckpointTool, AProcessInTheFailedStateReadsFailed) {
  std::ofstream(state_file()) << "failed";
  EXPECT_EQ(state(), "failed\n");
}

TEST_F(CudaCheckpointTool, AProcessWithoutACudaContextHasNoStateToGet) {
  fs::remove(context_file());
  const Ran ran = tool({"--get-state", "--pid", pid_text_});
  EXPECT_EQ(ran.exit_code, 1) << describe(ran);
  EXPECT_EQ(ran.out, "");  // the agent reads a failing --get-state as "no CUDA state"
  EXPECT_THAT(ran.err, AllOf(HasSubstr("could not get the state of process " + pid_text_),
                             HasSubstr("cuCheckpointProcessGetState returned CUDA_ERROR_INVALID_VALUE (invalid argument)")));
  EXPECT_THAT(ran.err, Not(HasSubstr("there is no process")));
}

TEST_F(CudaCheckpointTool, AProcessThatIsGoneIsNamedSo) {
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ::waitpid(gone, nullptr, 0);
  const Ran ran = tool({"--get-state", "--pid", std::to_string(gone)});
  EXPECT_EQ(ran.exit_code, 1) << describe(ran);
  EXPECT_THAT(ran.err, HasSubstr("there is no process " + std::to_string(gone)));
}

TEST_F(CudaCheckpointTool, ItsStateIsTheUtilityDoublesAndTheirsIsItsOwn) {
  // The same files as tests/fakes/fake_cuda_checkpoint.py, which the agent's other tests run.
  ASSERT_EQ(action("lock").exit_code, 0);
  const std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  Ran script = run("/usr/bin/python3", {FAKE_CUDA_CHECKPOINT_SCRIPT, "--get-state", "--pid", pid_text_}, env);
  EXPECT_EQ(script.out, "locked\n") << describe(script);
  script = run("/usr/bin/python3", {FAKE_CUDA_CHECKPOINT_SCRIPT, "--action", "checkpoint", "--pid", pid_text_}, env);
  EXPECT_EQ(script.exit_code, 0) << describe(script);
  EXPECT_EQ(state(), "checkpointed\n");
  EXPECT_THAT(actions(), ElementsAre(line("lock"), line("checkpoint")));
}

TEST_F(CudaCheckpointTool, ABadCommandLineExitsTwoWithOneLineAndNoDriverCall) {
  const Ran ran = tool({"--action", "freeze", "--pid", pid_text_});
  EXPECT_EQ(ran.exit_code, 2) << describe(ran);
  EXPECT_EQ(ran.err, "cnlab-cuda-checkpoint: --action \"freeze\": unknown action; allowed: lock, checkpoint, restore, unlock\n");
  EXPECT_EQ(tool({"--get-state", "--pid", "abc"}, (dir_ / "empty").string()).exit_code, 2);
  EXPECT_THAT(actions(), IsEmpty());
}

TEST_F(CudaCheckpointTool, HelpNeedsNoDriver) {
  const Ran ran = tool({"--help"}, (dir_ / "empty").string());
  EXPECT_EQ(ran.exit_code, 0) << describe(ran);
  EXPECT_THAT(ran.out, HasSubstr("usage:"));
}

TEST_F(CudaCheckpointTool, ADriverWithoutTheCheckpointApiIsNamedTooOld) {
  const Ran ran = tool({"--get-state", "--pid", pid_text_}, FAKE_CUDA_R550_DIR);
  EXPECT_EQ(ran.exit_code, 1) << describe(ran);
  EXPECT_THAT(ran.err, AllOf(HasSubstr("libcuda.so.1 has no cuCheckpointProcessGetState"), HasSubstr("predates the checkpoint API"),
                             HasSubstr("r570 or newer")));
}

// --check, which the agent runs once at start before it says its node checkpoints GPU state.
TEST_F(CudaCheckpointTool, CheckPassesOnlyWhereTheDriverHasTheCheckpointApi) {
  const Ran here = tool({"--check"}, FAKE_CUDA_DIR);
  EXPECT_EQ(here.exit_code, 0) << describe(here);
  EXPECT_THAT(here.out, HasSubstr("checkpoint API is here"));
  const Ran old = tool({"--check"}, FAKE_CUDA_R550_DIR);
  EXPECT_EQ(old.exit_code, 1) << describe(old);
  EXPECT_THAT(old.err, HasSubstr("r570 or newer"));
  EXPECT_EQ(tool({"--check", "--pid", pid_text_}, FAKE_CUDA_DIR).exit_code, 2) << "--check takes no other option";
}

TEST_F(CudaCheckpointTool, WithoutADriverItSaysItCannotLoadLibcuda) {
  if (void* real = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(real);
    GTEST_SKIP() << "a real libcuda.so.1 is installed on this machine (dlopen found it), so the tool would load "
                    "it whatever LD_LIBRARY_PATH says: nothing to test about a missing driver here";
  }
  const Ran ran = tool({"--action", "lock", "--pid", pid_text_}, (dir_ / "empty").string());
  EXPECT_EQ(ran.exit_code, 1) << describe(ran);
  EXPECT_THAT(ran.err, AllOf(HasSubstr("cannot load libcuda.so.1"), HasSubstr("r570 or newer")));
  EXPECT_THAT(ran.err, Not(HasSubstr("\n\n")));
}

}  // namespace
}  // namespace cnlab::cuda_checkpoint_tool
