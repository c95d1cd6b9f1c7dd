// Part of the TEST DOUBLE of libcuda.so.1 (see fake_cuda.cpp): the driver's checkpoint API of CUDA
// 12.8 / r570 (cuCheckpointProcessGetState, Lock, Checkpoint, Restore, Unlock), which
// cnlab-cuda-checkpoint calls. Nothing here touches a GPU or the other process: the same state
// machine and on-disk conventions as the utility's test double, tests/fakes/fake_cuda_checkpoint.py,
// so that a test can mix the two:
//
//   running -(lock)-> locked -(checkpoint)-> checkpointed -(restore)-> locked -(unlock)-> running
//
// - A process "holds a CUDA context" when `.fake-cuda-context.<its pid in its own namespace>`
//   exists in its working directory (/proc/<pid>/cwd); `pid` is a pid of the caller's namespace.
// - Its state is in `.fake-cuda-state.<that pid>` there ("running", "locked", "checkpointed" or
//   "failed"; anything else reads as failed), absent meaning running; written under a temporary
//   name and renamed into place.
// - Every action done is appended to `.fake-cuda-actions` there: "<pid> <action>[ <device map>]",
//   the map as "OLD=NEW,..." with the UUIDs in NVML's text, lower-case hex
//   (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx).
// - A word of the context file naming an action (lock, checkpoint, restore, unlock) makes that
//   action fail with CUDA_ERROR_NOT_SUPPORTED ("operation not supported"), like a driver that
//   refuses it. Only here: the word `busy` is CUDA work in flight that never finishes while the
//   word is there; lock waits for it to go (polling every 10 ms), at most the lock's timeoutMs
//   (0: no limit), and on timeout returns CUDA_ERROR_NOT_READY leaving the process running.
//
// Errors, checked in this order: before cuInit, CUDA_ERROR_NOT_INITIALIZED (the real driver needs
// cuInit in the caller for a restore; the fake asks it of every call); pid <= 0, no such process,
// no context file, a NULL state pointer, non-zero reserved fields of the arguments, or a restore
// with gpuPairsCount > 0 and no gpuPairs: CUDA_ERROR_INVALID_VALUE (the value the driver documents
// for a bad argument; NOT_FOUND is not among its documented results); a refused action:
// CUDA_ERROR_NOT_SUPPORTED; an action from the wrong state: CUDA_ERROR_ILLEGAL_STATE, nothing
// written. A file that cannot be written: CUDA_ERROR_OPERATING_SYSTEM. Arguments may be NULL (all
// optional), as with the real driver.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fake_cuda_internal.h"

namespace {

using namespace cnlab::fake_cuda;

struct Target {
  std::string dir;     // its working directory, with a trailing '/'
  std::string nspid;   // its pid in its own namespace: the name of its files
  std::string context; // the context file
  std::string state;   // the state file
};

CUresult find_target(int pid, Target& out) {
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream status(proc + "/status");
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  out.nspid = std::to_string(pid);
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    for (std::string field; fields >> field;) out.nspid = field;  // the innermost namespace's
  }
  char cwd[4096];
  const ssize_t n = ::readlink((proc + "/cwd").c_str(), cwd, sizeof cwd - 1);
  if (n <= 0) return CUDA_ERROR_INVALID_VALUE;
  out.dir = std::string(cwd, static_cast<size_t>(n)) + "/";
  out.context = out.dir + ".fake-cuda-context." + out.nspid;
  out.state = out.dir + ".fake-cuda-state." + out.nspid;
  return ::access(out.context.c_str(), F_OK) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

std::vector<std::string> words_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

bool has_word(const std::string& path, const char* word) {
  for (const std::string& w : words_of(path)) {
    if (w == word) return true;
  }
  return false;
}

std::string state_of(const Target& t) {
  std::ifstream in(t.state);
  if (!in) return "running";
  std::string state;
  in >> state;
  return state;
}

bool zeroed(const void* bytes, size_t size) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < size; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

std::string uuid_text(const CUuuid& uuid) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    const auto byte = static_cast<unsigned char>(uuid.bytes[i]);
    out += kHex[byte >> 4];
    out += kHex[byte & 0xF];
  }
  return out;
}

uint64_t now_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

bool write_all(int fd, const std::string& text) {
  return ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

// Takes `pid` from `before` to `after`: the checks above, then the action's line and the new state.
CUresult transition(int pid, const char* action, const char* before, const char* after, const std::string& map = "",
                    unsigned lock_timeout_ms = 0) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  Target t;
  if (CUresult r = find_target(pid, t); r != CUDA_SUCCESS) return r;
  if (has_word(t.context, action)) return CUDA_ERROR_NOT_SUPPORTED;
  if (state_of(t) != before) return CUDA_ERROR_ILLEGAL_STATE;
  if (std::strcmp(action, "lock") == 0) {
    const uint64_t deadline = now_ms() + lock_timeout_ms;
    while (has_word(t.context, "busy")) {
      if (lock_timeout_ms != 0 && now_ms() >= deadline) return CUDA_ERROR_NOT_READY;
      ::usleep(10 * 1000);
    }
  }
  const int log = ::open((t.dir + ".fake-cuda-actions").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (log < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  const bool logged = write_all(log, t.nspid + " " + action + (map.empty() ? "" : " " + map) + "\n");
  ::close(log);
  const std::string temporary = t.state + ".new";
  const int out = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  const bool written = write_all(out, after);
  ::close(out);
  if (!logged || !written || ::rename(temporary.c_str(), t.state.c_str()) != 0) return CUDA_ERROR_OPERATING_SYSTEM;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuCheckpointProcessGetState(int pid, CUprocessState* state) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  Target t;
  if (CUresult r = find_target(pid, t); r != CUDA_SUCCESS) return r;
  const std::string s = state_of(t);
  *state = s == "running"        ? CU_PROCESS_STATE_RUNNING
           : s == "locked"       ? CU_PROCESS_STATE_LOCKED
           : s == "checkpointed" ? CU_PROCESS_STATE_CHECKPOINTED
                                 : CU_PROCESS_STATE_FAILED;
  return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs* args) {
  if (args && (args->reserved0 != 0 || !zeroed(args->reserved1, sizeof args->reserved1))) {
    return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  }
  return transition(pid, "lock", "running", "locked", "", args ? args->timeoutMs : 0);
}

CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs* args) {
  if (args && !zeroed(args, sizeof *args)) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  return transition(pid, "checkpoint", "locked", "checkpointed");
}

CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs* args) {
  std::string map;
  if (args) {
    const bool bad = !zeroed(args->reserved, sizeof args->reserved) || args->reserved1 != 0 ||
                     (args->gpuPairsCount > 0 && !args->gpuPairs);
    if (bad) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    for (unsigned i = 0; i < args->gpuPairsCount; ++i) {
      map += (i ? "," : "") + uuid_text(args->gpuPairs[i].oldUuid) + "=" + uuid_text(args->gpuPairs[i].newUuid);
    }
  }
  return transition(pid, "restore", "checkpointed", "locked", map);
}

CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs* args) {
  if (args && !zeroed(args, sizeof *args)) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  return transition(pid, "unlock", "locked", "running");
}

}  // extern "C"
