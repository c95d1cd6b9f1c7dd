// `cnlab sim ...`: the trace-driven simulator's command line.
//
//   cnlab sim alloc --nodes NODES.csv --pods PODS.csv [--pods MORE.csv ...]
//                   [--policies random,dotprod,...] [--seeds 42-51] [--threads N]
//                   [--reference FILE] --out DIR
//
// `cnlab sim replay` (the replay experiment) is added beside alloc by replay_command.h.
//
// Exit codes: 0 done; 2 bad flags or input files (a message on stderr names the flag or file, the
// value and what is allowed); 1 an internal failure (a policy's invalid choice). A failing command
// ends the parse with CLI::RuntimeError(code), which CLI11's App::exit turns into that exit code
// without printing more.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "common/common.h"
#include "sim/policy_registry.h"

namespace cnlab::sim {

// Adds `sim` (and under it `alloc`) to `app`. `registry` holds the policies --policies may name;
// all of them, in order, are the default. Another sub-command (replay) can be added beside alloc:
// it is looked up as app.get_subcommand("sim").
void add_sim_commands(CLI::App& app, PolicyRegistry registry = default_policies());

// "42-51" or "1,2,7-9": the seeds in the order given, duplicates removed. `field` names the flag.
Result<std::vector<uint64_t>> parse_seed_list(std::string_view text, std::string_view field);

}  // namespace cnlab::sim
