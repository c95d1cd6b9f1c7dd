// cnlab-cuda-checkpoint: NVIDIA's cuda-checkpoint utility's command line (the subset the agent runs:
// command_line.h) on the driver's own checkpoint API (libcuda.so.1 of r570+: cuCheckpointProcess*),
// for GPU machines where NVIDIA's utility, a separate download, is not installed. The agent runs
// it in the utility's place when it sits beside the `cnlab` binary (cuda::find_tool), unchanged:
// `--get-state` prints only the state word on stdout; errors are one line on stderr; it prints
// nothing when an action is done. Exit codes: 0 done, 1 the driver is missing or refused, 2 a bad
// command line.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "agent/cuda_checkpoint_tool/command_line.h"
#include "agent/cuda_checkpoint_tool/driver.h"

namespace {

using namespace cnlab::cuda_checkpoint_tool;

constexpr const char* kName = "cnlab-cuda-checkpoint";

const char* state_name(cu::CUprocessState state) {
  switch (state) {
    case cu::CU_PROCESS_STATE_RUNNING: return "running";
    case cu::CU_PROCESS_STATE_LOCKED: return "locked";
    case cu::CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
    case cu::CU_PROCESS_STATE_FAILED: return "failed";
  }
  return nullptr;
}

// Why a call about `pid` failed, where the driver's error does not say: the process is gone.
std::string gone(int pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  return ::access(proc.c_str(), F_OK) == 0 ? "" : "; there is no process " + std::to_string(pid);
}

std::string failure(const Driver& driver, const char* doing, const char* function, int pid, cu::CUresult result) {
  return std::string("could not ") + doing + " process " + std::to_string(pid) + ": " + function + " returned " +
         driver.describe(result) + gone(pid);
}

int fail(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", kName, message.c_str());
  return 1;
}

// Runs one action; an empty string when done, else what failed.
std::string act(const Driver& driver, const Command& command, Action action) {
  const int pid = command.pid;
  cu::CUresult r = cu::CUDA_SUCCESS;
  const char* function = "";
  switch (action) {
    case Action::kLock:
      r = driver.lock(pid, command.timeout_ms);
      function = "cuCheckpointProcessLock";
      break;
    case Action::kCheckpoint:
      r = driver.checkpoint(pid);
      function = "cuCheckpointProcessCheckpoint";
      break;
    case Action::kRestore:
      r = driver.restore(pid, command.device_map);
      function = "cuCheckpointProcessRestore";
      break;
    case Action::kUnlock:
      r = driver.unlock(pid);
      function = "cuCheckpointProcessUnlock";
      break;
  }
  return r == cu::CUDA_SUCCESS ? "" : failure(driver, action_name(action), function, pid, r);
}

int get_state(const Driver& driver, int pid) {
  cu::CUprocessState state = cu::CU_PROCESS_STATE_RUNNING;
  if (const cu::CUresult r = driver.get_state(pid, state); r != cu::CUDA_SUCCESS) {
    return fail(failure(driver, "get the state of", "cuCheckpointProcessGetState", pid, r));
  }
  const char* name = state_name(state);
  if (!name) return fail("process " + std::to_string(pid) + " is in CUDA process state " + std::to_string(state) + ", which this tool does not know");
  std::printf("%s\n", name);
  return 0;
}

// running: lock and checkpoint (unlocking again when the checkpoint fails); checkpointed: restore
// and unlock.
int toggle(const Driver& driver, const Command& command) {
  cu::CUprocessState state = cu::CU_PROCESS_STATE_RUNNING;
  if (const cu::CUresult r = driver.get_state(command.pid, state); r != cu::CUDA_SUCCESS) {
    return fail(failure(driver, "get the state of", "cuCheckpointProcessGetState", command.pid, r));
  }
  if (state == cu::CU_PROCESS_STATE_RUNNING) {
    if (auto error = act(driver, command, Action::kLock); !error.empty()) return fail(error);
    if (auto error = act(driver, command, Action::kCheckpoint); !error.empty()) {
      const std::string unlocked = act(driver, command, Action::kUnlock);
      return fail(error + (unlocked.empty() ? "; unlocked it again" : "; unlocking it again failed too: " + unlocked));
    }
    return 0;
  }
  if (state == cu::CU_PROCESS_STATE_CHECKPOINTED) {
    if (auto error = act(driver, command, Action::kRestore); !error.empty()) return fail(error);
    if (auto error = act(driver, command, Action::kUnlock); !error.empty()) return fail(error);
    return 0;
  }
  const char* name = state_name(state);
  return fail("cannot toggle process " + std::to_string(command.pid) + ": its CUDA state is " +
              (name ? name : std::to_string(state)) + ", neither running nor checkpointed" +
              (state == cu::CU_PROCESS_STATE_LOCKED ? " (use --action checkpoint or --action unlock)" : ""));
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const auto parsed = parse_command_line(args);
  if (!parsed) {
    std::fprintf(stderr, "%s: %s\n", kName, parsed.error.c_str());
    return 2;
  }
  const Command& command = *parsed;
  if (command.operation == Operation::kHelp) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  auto loaded = Driver::load();
  if (!loaded.driver) return fail(loaded.error);
  const Driver& driver = *loaded.driver;
  switch (command.operation) {
    case Operation::kCheck: std::printf("the driver's checkpoint API is here\n"); return 0;
    case Operation::kGetState: return get_state(driver, command.pid);
    case Operation::kToggle: return toggle(driver, command);
    case Operation::kAction: {
      const std::string error = act(driver, command, command.action);
      return error.empty() ? 0 : fail(error);
    }
    case Operation::kHelp: break;
  }
  return 0;
}
