// server_bench --loop: the scheduling loop (src/server/scheduler_loop.h) on a SQLite store holding
// the scheduler benchmark's workload (bench/workload.h), against sched::run_cycle on the same
// workload built directly.
#pragma once

namespace cnlab::bench {

struct LoopOptions {
  int nodes = 4000;      // 8 GPUs and 35 jobs each: 140,000 jobs at 4,000
  int cycles = 10;       // steady-state cycles
  double change = 0.02;  // fraction of the jobs changed between cycles (half finish, as many arrive)
  int bare_repeats = 5;
  bool verbose = false;  // a line per steady-state cycle
};

int run_loop_bench(const LoopOptions& options);

}  // namespace cnlab::bench
