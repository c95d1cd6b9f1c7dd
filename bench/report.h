// What the benchmark binaries that start real processes print and read the same way: the machine
// line with its speed probe (so that runs on this drifting VM can be compared), a process's CPU
// time and memory from /proc, milliseconds.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server_cluster.h"
#include "workload.h"

namespace cnlab::bench {

inline double ms(double seconds) { return seconds * 1e3; }

// This virtual machine's speed drifts by tens of percent over minutes: each run starts with the same
// probe as sched_bench's BM_Cycle/nodes:1000 (45 ms in docs/benchmarks/scheduler.md), so runs can be
// compared.
inline void print_machine_line() {
  std::printf("machine: %u hardware threads, load average %.2f at start; ", std::thread::hardware_concurrency(),
              load_average());
  sched::Snapshot probe = loaded_cluster({1000, 35, 42});
  std::vector<double> times;
  for (int i = 0; i < 3; ++i) {
    auto started = Clock::now();
    auto result = sched::run_cycle(probe, {});
    times.push_back(seconds_since(started));
  }
  std::sort(times.begin(), times.end());
  std::printf("speed probe (sched::run_cycle at 1,000 nodes, median of 3): %.1f ms\n", times[1] * 1e3);
  std::fflush(stdout);
}

// A field of /proc/PID/status in KiB (VmRSS, VmHWM) or as a count (Threads); -1 when the process is
// gone or has no such field.
inline int64_t process_status_field(pid_t pid, const char* name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  std::string prefix = std::string(name) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::strtoll(line.c_str() + prefix.size(), nullptr, 10);
  }
  return -1;
}

// User + system CPU time a process has used so far (fields 14 and 15 of /proc/PID/stat); 0 when gone.
inline double process_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::stringstream text;
  text << in.rdbuf();
  std::string stat = text.str();
  // Fields after the command's closing parenthesis: state is field 3; utime 14, stime 15.
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace cnlab::bench
