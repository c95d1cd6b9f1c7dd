#include "agent/cuda_checkpoint_tool/command_line.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <set>

namespace cnlab::cuda_checkpoint_tool {
namespace {

constexpr const char* kOperations = "--get-state, --action lock|checkpoint|restore|unlock or --toggle";
constexpr const char* kUuidForm = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (32 hex digits)";
constexpr const char* kMapForm = "OLD=NEW[,OLD=NEW...], each a GPU UUID";

template <typename T>
Parsed<T> fail(std::string error) {
  return Parsed<T>{std::nullopt, std::move(error)};
}

std::string quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }

// A whole decimal number (digits only) up to `max`; nullopt otherwise.
std::optional<uint64_t> whole_number(std::string_view text, uint64_t max) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (max - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The option's value: after '=' in the same argument, else the next argument (one that is not
// itself an option).
struct Option {
  std::string name;
  std::optional<std::string> value;
};

}  // namespace

std::optional<Uuid> parse_uuid(std::string_view text) {
  // GPU- then 8-4-4-4-12 hex digits: dashes at these offsets of the text.
  constexpr std::string_view kPrefix = "GPU-";
  constexpr size_t kLength = 4 + 32 + 4;
  if (text.size() != kLength || text.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  Uuid uuid{};
  size_t digits = 0;
  for (size_t i = kPrefix.size(); i < text.size(); ++i) {
    const bool dash_here = i == 12 || i == 17 || i == 22 || i == 27;
    if (dash_here) {
      if (text[i] != '-') return std::nullopt;
      continue;
    }
    const int v = hex_value(text[i]);
    if (v < 0) return std::nullopt;
    uuid[digits / 2] = static_cast<unsigned char>(digits % 2 == 0 ? v << 4 : uuid[digits / 2] | v);
    ++digits;
  }
  return uuid;
}

std::string format_uuid(const Uuid& uuid) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[uuid[i] >> 4];
    out += kHex[uuid[i] & 0xF];
  }
  return out;
}

Parsed<std::vector<GpuPair>> parse_device_map(std::string_view text) {
  std::vector<GpuPair> pairs;
  std::set<Uuid> seen;
  if (text.empty()) return fail<std::vector<GpuPair>>(std::string("empty; expected ") + kMapForm);
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string_view entry = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const size_t equals = entry.find('=');
    if (equals == std::string_view::npos) {
      return fail<std::vector<GpuPair>>("entry " + quoted(entry) + " has no \"=\"; expected " + kMapForm);
    }
    GpuPair pair;
    for (const auto& [side, into] : {std::pair{entry.substr(0, equals), &pair.from}, std::pair{entry.substr(equals + 1), &pair.to}}) {
      auto uuid = parse_uuid(side);
      if (!uuid) return fail<std::vector<GpuPair>>(quoted(side) + " is not a GPU UUID; expected " + kUuidForm);
      *into = *uuid;
    }
    if (!seen.insert(pair.from).second) {
      return fail<std::vector<GpuPair>>(quoted(entry.substr(0, equals)) + " is mapped twice; each GPU the process was checkpointed on is mapped once");
    }
    pairs.push_back(pair);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return Parsed<std::vector<GpuPair>>{std::move(pairs), ""};
}

const char* action_name(Action action) {
  switch (action) {
    case Action::kLock: return "lock";
    case Action::kCheckpoint: return "checkpoint";
    case Action::kRestore: return "restore";
    case Action::kUnlock: return "unlock";
  }
  return "?";
}

Parsed<Command> parse_command_line(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") return Parsed<Command>{Command{}, ""};
  }
  // --check, alone: whether the driver loads with its checkpoint API (what the agent asks once, at
  // start, before it says that its node checkpoints GPU state).
  if (std::find(args.begin(), args.end(), "--check") != args.end()) {
    if (args.size() != 1) return fail<Command>("--check takes no other option");
    Command check;
    check.operation = Operation::kCheck;
    return Parsed<Command>{check, ""};
  }
  bool get_state = false;
  bool toggle = false;
  std::optional<std::string> action, pid, timeout, device_map;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const size_t equals = arg.rfind("--", 0) == 0 ? arg.find('=') : std::string::npos;
    const std::string name = arg.substr(0, equals);
    if (name == "--get-state" || name == "--toggle") {
      if (equals != std::string::npos) return fail<Command>(name + " takes no value (given " + quoted(arg.substr(equals + 1)) + ")");
      bool& flag = name == "--get-state" ? get_state : toggle;
      if (flag) return fail<Command>(name + " is given twice");
      flag = true;
      continue;
    }
    std::optional<std::string>* slot = name == "--action"       ? &action
                                       : name == "--pid"        ? &pid
                                       : name == "--timeout"    ? &timeout
                                       : name == "--device-map" ? &device_map
                                                                : nullptr;
    if (!slot) {
      return fail<Command>("unknown option " + quoted(arg) +
                           "; allowed: --get-state, --action, --toggle, --pid, --timeout, --device-map, --help");
    }
    if (slot->has_value()) return fail<Command>(name + " is given twice");
    if (equals != std::string::npos) {
      *slot = arg.substr(equals + 1);
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      *slot = args[++i];
    } else {
      const char* what = name == "--action"  ? "lock, checkpoint, restore or unlock"
                         : name == "--pid"   ? "a process id"
                         : name == "--timeout" ? "milliseconds (0: no limit)"
                                               : kMapForm;
      return fail<Command>(name + " needs a value: " + what);
    }
  }

  Command command;
  const int operations = (get_state ? 1 : 0) + (toggle ? 1 : 0) + (action ? 1 : 0);
  if (operations == 0) return fail<Command>(std::string("nothing to do: give one of ") + kOperations + " (see --help)");
  if (operations > 1) {
    return fail<Command>(std::string(get_state ? "--get-state" : "--action") + " and " + (toggle ? "--toggle" : "--action") +
                         " cannot be combined: give one of " + kOperations);
  }
  if (get_state) command.operation = Operation::kGetState;
  if (toggle) command.operation = Operation::kToggle;
  if (action) {
    command.operation = Operation::kAction;
    bool known = false;
    for (Action a : {Action::kLock, Action::kCheckpoint, Action::kRestore, Action::kUnlock}) {
      if (*action == action_name(a)) {
        command.action = a;
        known = true;
      }
    }
    if (!known) return fail<Command>("--action " + quoted(*action) + ": unknown action; allowed: lock, checkpoint, restore, unlock");
  }

  if (!pid) return fail<Command>("--pid is required: the id of the process whose CUDA state to get or change");
  const auto pid_value = whole_number(*pid, INT_MAX);
  if (!pid_value || *pid_value == 0) {
    return fail<Command>("--pid " + quoted(*pid) + ": not a process id; expected a whole number from 1 to " + std::to_string(INT_MAX));
  }
  command.pid = static_cast<int>(*pid_value);

  const bool locks = command.operation == Operation::kToggle ||
                     (command.operation == Operation::kAction && command.action == Action::kLock);
  const bool restores = command.operation == Operation::kToggle ||
                        (command.operation == Operation::kAction && command.action == Action::kRestore);
  const std::string what = command.operation == Operation::kGetState ? std::string("--get-state")
                                                                      : std::string("--action ") + action_name(command.action);
  if (timeout) {
    if (!locks) return fail<Command>("--timeout applies only to --action lock and --toggle, not to " + what);
    const auto ms = whole_number(*timeout, UINT_MAX);
    if (!ms) {
      return fail<Command>("--timeout " + quoted(*timeout) + ": not a number of milliseconds; expected a whole number from 0 (no limit) to " +
                           std::to_string(UINT_MAX));
    }
    command.timeout_ms = static_cast<unsigned>(*ms);
  }
  if (device_map) {
    if (!restores) return fail<Command>("--device-map applies only to --action restore and --toggle, not to " + what);
    auto map = parse_device_map(*device_map);
    if (!map) return fail<Command>("--device-map " + quoted(*device_map) + ": " + map.error);
    command.device_map = *map;
  }
  return Parsed<Command>{std::move(command), ""};
}

std::string usage() {
  return R"(cnlab-cuda-checkpoint: suspends and resumes a process's CUDA state through the driver's checkpoint
API (libcuda.so.1 of driver r570 or newer), with the command line of NVIDIA's cuda-checkpoint.

usage:
  cnlab-cuda-checkpoint --get-state --pid PID
      prints the process's CUDA state: running, locked, checkpointed or failed
  cnlab-cuda-checkpoint --action lock --pid PID [--timeout MS]
      blocks the process's CUDA calls once its work in flight is done (waiting at most MS
      milliseconds; 0 or none: no limit)
  cnlab-cuda-checkpoint --action checkpoint --pid PID
      moves a locked process's GPU memory into its host memory and releases its GPUs
  cnlab-cuda-checkpoint --action restore --pid PID [--device-map OLD=NEW[,OLD=NEW...]]
      brings a checkpointed process back onto its GPUs, or onto others (GPU UUIDs as NVML writes
      them: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx; the map must name every GPU it was on)
  cnlab-cuda-checkpoint --action unlock --pid PID
      lets a locked process make CUDA calls again
  cnlab-cuda-checkpoint --toggle --pid PID [--timeout MS] [--device-map ...]
      running: lock and checkpoint; checkpointed: restore and unlock
  cnlab-cuda-checkpoint --check
      exits 0 when the driver loads with its checkpoint API (the agent asks once, at start)
  cnlab-cuda-checkpoint --help

States: running -(lock)-> locked -(checkpoint)-> checkpointed -(restore)-> locked -(unlock)-> running.
Exit codes: 0 done; 1 the driver is missing, has no checkpoint API, or refused (its error is
printed); 2 a bad command line.
)";
}

}  // namespace cnlab::cuda_checkpoint_tool
