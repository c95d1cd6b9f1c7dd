// Helpers for the runtime's tests: temporary directories, the test shim, collecting a job's output
// and the processes of a tree.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/runtime/runtime.h"

namespace cnlab::agent::testing {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A fresh directory under /tmp, removed with everything in it. 0755, so that a job run as another
// user can reach a job directory inside it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "cnlab-runtime-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
    ::chmod(path_.c_str(), 0755);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline RuntimeOptions test_options() {
  RuntimeOptions options;
  options.shim_command = {CNLAB_TEST_SHIM};
  // Per test process: tests run in parallel with other engineers' and in separate processes.
  options.cgroup_parent = "cnlab-test-" + std::to_string(::getpid());
  return options;
}

// The options of a runtime that takes transparent checkpoints: this machine's CRIU, a minute per
// dump. make deps installs CRIU (scripts/install-criu.sh), so its absence is a missing install step.
inline RuntimeOptions checkpoint_options() {
  RuntimeOptions options = test_options();
  options.criu = find_criu();
  EXPECT_FALSE(options.criu.empty()) << "no criu on this machine: run make deps (scripts/install-criu.sh builds it)";
  options.checkpoint_timeout = 60s;
  return options;
}
// Creates the runtime and checks that it can checkpoint; false (with the failure recorded) if not.
inline bool start_checkpoint_runtime(const RuntimeOptions& options, std::unique_ptr<Runtime>* out) {
  if (options.criu.empty()) return false;
  auto runtime = Runtime::create(options);
  EXPECT_TRUE(runtime) << runtime.error().to_string();
  if (!runtime) return false;
  *out = std::move(*runtime);
  EXPECT_TRUE((*out)->capabilities().checkpoint) << (*out)->capabilities().checkpoint_reason;
  return (*out)->capabilities().checkpoint;
}

inline ProcessSpec shell_job(const fs::path& job_dir, std::string script) {
  ProcessSpec spec;
  spec.job_id = "test/" + job_dir.filename().string();
  spec.argv = {"/bin/sh", "-c", std::move(script)};
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  spec.job_dir = job_dir;
  return spec;
}

// Reads the job's output until it has exited and the file is drained, or `timeout` passes.
inline std::vector<OutputLine> collect(const JobHandle& job, OutputReader& reader,
                                       std::chrono::milliseconds timeout = 15s) {
  std::vector<OutputLine> lines;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto batch = reader.read();
    if (!batch) break;
    if (!batch->empty()) {
      for (auto& line : *batch) lines.push_back(std::move(line));
      continue;
    }
    if (job.status().state != JobState::kRunning) {
      // exit.json comes after the last output: one more read gets everything.
      auto rest = reader.read(1u << 30);
      if (rest) {
        for (auto& line : *rest) lines.push_back(std::move(line));
      }
      break;
    }
    reader.wait(50ms);
  }
  return lines;
}

inline std::vector<OutputLine> collect(const JobHandle& job, std::chrono::milliseconds timeout = 15s) {
  auto reader = OutputReader::open(job.output_path());
  if (!reader) return {};
  return collect(job, *reader, timeout);
}

inline std::vector<std::string> texts(const std::vector<OutputLine>& lines, std::optional<OutputStream> stream = {}) {
  std::vector<std::string> out;
  for (const auto& line : lines) {
    if (!stream || line.stream == *stream) out.push_back(line.text);
  }
  return out;
}

// Reads until a line for which `found` holds arrives; returns everything read so far.
template <typename Found>
std::vector<OutputLine> read_until(OutputReader& reader, Found found, std::chrono::milliseconds timeout = 10s) {
  std::vector<OutputLine> lines;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto batch = reader.read();
    if (!batch) break;
    bool done = false;
    for (auto& line : *batch) {
      done = done || found(line.text);
      lines.push_back(std::move(line));
    }
    if (done) break;
    reader.wait(50ms);
  }
  return lines;
}

// Reads until a line with `text` arrives; returns everything read so far.
inline std::vector<OutputLine> read_until_text(OutputReader& reader, const std::string& text,
                                               std::chrono::milliseconds timeout = 10s) {
  return read_until(reader, [&](const std::string& line) { return line == text; }, timeout);
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// A process, named for good by its pid and start time.
struct ProcessId {
  pid_t pid = 0;
  std::string start_time;
};

inline std::string start_time_of(pid_t pid) {
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && (fields >> field); ++i) {
    if (i == 22) return field;
  }
  return "";
}

// Every descendant of `root` (not `root` itself), from /proc/<pid>/task/<tid>/children.
inline std::vector<ProcessId> descendants(pid_t root) {
  std::vector<ProcessId> out;
  std::vector<pid_t> queue{root};
  while (!queue.empty()) {
    const pid_t pid = queue.back();
    queue.pop_back();
    const fs::path tasks = "/proc/" + std::to_string(pid) + "/task";
    std::error_code ec;
    for (const auto& task : fs::directory_iterator(tasks, ec)) {
      std::istringstream children(read_text(task.path() / "children"));
      pid_t child;
      while (children >> child) {
        out.push_back({child, start_time_of(child)});
        queue.push_back(child);
      }
    }
  }
  return out;
}

// Still the same process, and not a zombie.
inline bool still_running(const ProcessId& process) {
  const std::string stat = read_text("/proc/" + std::to_string(process.pid) + "/stat");
  if (stat.empty() || start_time_of(process.pid) != process.start_time) return false;
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Waits until this process has no children left, reaping them: every shim exits after its job.
inline bool no_children_left(std::chrono::milliseconds timeout = 3s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
    if (pid < 0) return true;  // ECHILD
    if (pid == 0) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
  }
}

// A wrapper shell that does not handle SIGUSR1 around a Python program that does, and that forks
// a worker inheriting its handler. On SIGUSR1 the one that gets it prints "saved by main" or
// "saved by worker"; the program then ends and the wrapper prints "wrapper-after".
inline ProcessSpec checkpoint_signal_job(const fs::path& job_dir) {
  ProcessSpec spec = shell_job(job_dir, "");
  spec.argv = {"/bin/sh", "-c", "python3 -c \"$0\"; echo wrapper-after",
               "import os, signal, sys, time\n"
               "main = os.getpid()\n"
               "def saved(*_):\n"
               "    print('saved by', 'main' if os.getpid() == main else 'worker', flush=True)\n"
               "    if os.getpid() == main:\n"
               "        os.kill(worker, signal.SIGKILL)\n"
               "        sys.exit(0)\n"
               "signal.signal(signal.SIGUSR1, saved)\n"
               "worker = os.fork()\n"
               "if worker == 0:\n"
               "    time.sleep(30)\n"
               "    os._exit(0)\n"
               "print('ready', flush=True)\n"
               "time.sleep(30)\n"};
  return spec;
}

// The job of checkpoint_signal_job gets SIGUSR1 in its program, not in its wrapper or worker.
inline void expect_checkpoint_signal_passes_the_wrapper(const JobHandle& job) {
  auto reader = OutputReader::open(job.output_path());
  ASSERT_TRUE(reader);
  ASSERT_THAT(texts(read_until_text(*reader, "ready")), ::testing::ElementsAre("ready"));
  ASSERT_TRUE(job.send_checkpoint_signal());
  // The wrapper lives on to print after the program: it was not sent the signal.
  EXPECT_THAT(texts(collect(job, *reader)), ::testing::ElementsAre("saved by main", "wrapper-after"));
  EXPECT_EQ(job.status().exit_code, 0);
}

// A running job none of whose processes handles SIGUSR1 is not sent it, and runs on until stopped.
inline void expect_checkpoint_signal_not_sent_without_a_handler(const JobHandle& job) {
  const auto sent = job.send_checkpoint_signal();
  ASSERT_FALSE(sent);
  EXPECT_THAT(sent.error().message, ::testing::HasSubstr("handles SIGUSR1"));
  // SIGUSR1 would have ended it at once.
  EXPECT_EQ(job.wait(std::chrono::milliseconds(300)).state, JobState::kRunning);
  auto stopped = job.stop(std::chrono::milliseconds(0));
  ASSERT_TRUE(stopped) << stopped.error().to_string();
  EXPECT_EQ(stopped->state, JobState::kExited);
  EXPECT_TRUE(stopped->signal.has_value()) << "ended by the stop, not by itself";
  EXPECT_FALSE(job.send_checkpoint_signal());
}

}  // namespace cnlab::agent::testing
