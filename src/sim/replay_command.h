// `cnlab sim replay`: the trace replay experiment's command line.
//
//   cnlab sim replay --trace FILE (--nodes NODES.csv | --cluster 300:h100x8,20:l4x2)
//                    [--policies fifo,cnlab] --out DIR
//                    [--cycle-interval 10s] [--sample-every 5m] [--checkpoint-every 30m]
//                    [--checkpointable all|none|CLASS,...] [--power-down-after 30m]
//                    [--cpu-per-gpu 16] [--memory-per-gpu 128Gi]
//
// Writes DIR/summary.md, DIR/timeseries.csv, DIR/jobs.csv and DIR/replay.svg and prints the
// summary and the run time of each policy. Exit codes as for `cnlab sim alloc`: 0 done; 2 bad
// flags or input (a message on stderr names the flag or file, the value and what is allowed);
// 1 an internal failure (a policy's impossible decision).
#pragma once

#include <CLI/CLI.hpp>

namespace cnlab::sim {

// Adds `replay` under the `sim` command.
void add_replay_command(CLI::App& sim);

}  // namespace cnlab::sim
