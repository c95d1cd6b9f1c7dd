// cnlab-cuda-checkpoint's command line: the subset of NVIDIA's cuda-checkpoint utility that the
// agent runs (src/agent/runtime/cuda_checkpoint.h), parsed without touching a driver, so that it is
// tested on any machine. main.cpp runs what it parses; driver.{h,cpp} make the driver calls.
//
//   --get-state --pid N                          prints running, locked, checkpointed or failed
//   --action lock --pid N [--timeout MS]         MS: how long to wait for CUDA work in flight; 0: no limit
//   --action checkpoint --pid N
//   --action restore --pid N [--device-map OLD=NEW[,OLD=NEW...]]   onto other GPUs (NVML's UUID text)
//   --action unlock --pid N
//   --toggle --pid N [--timeout MS] [--device-map ...]   running -> checkpointed, checkpointed -> running
//   --help
// Every option also takes its value as --option=VALUE. Exit codes: 0 done, 1 the driver is missing
// or refused, 2 a bad command line.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cnlab::cuda_checkpoint_tool {

// A GPU's UUID as the driver holds it (CUuuid's 16 bytes).
using Uuid = std::array<unsigned char, 16>;

// One entry of --device-map: the GPU the process was checkpointed on, and the one to restore it onto.
struct GpuPair {
  Uuid from{};
  Uuid to{};
};

enum class Operation { kHelp, kCheck, kGetState, kAction, kToggle };
enum class Action { kLock, kCheckpoint, kRestore, kUnlock };

struct Command {
  Operation operation = Operation::kHelp;
  Action action = Action::kLock;     // for Operation::kAction
  int pid = 0;                       // > 0 unless kHelp
  unsigned timeout_ms = 0;           // the lock's (--action lock, --toggle); 0: no limit
  std::vector<GpuPair> device_map;   // the restore's (--action restore, --toggle); empty: same GPUs
};

// A parsed value, or one line saying what was wrong: the option, the value and what is allowed.
template <typename T>
struct Parsed {
  std::optional<T> value;
  std::string error;
  explicit operator bool() const { return value.has_value(); }
  const T& operator*() const { return *value; }
  const T* operator->() const { return &*value; }
};

// `args` without the program name. Pure.
Parsed<Command> parse_command_line(const std::vector<std::string>& args);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (NVML's and cuda-checkpoint's text; hex digits in
// either case): its 32 hex digits are the 16 bytes, in order. Anything else: nullopt.
std::optional<Uuid> parse_uuid(std::string_view text);

// The same text, lower-case hex: parse_uuid(format_uuid(u)) == u.
std::string format_uuid(const Uuid& uuid);

// "OLD=NEW[,OLD=NEW...]", each a GPU UUID; an OLD named twice is an error.
Parsed<std::vector<GpuPair>> parse_device_map(std::string_view text);

// "lock", "checkpoint", "restore", "unlock".
const char* action_name(Action action);

// What --help prints.
std::string usage();

}  // namespace cnlab::cuda_checkpoint_tool
