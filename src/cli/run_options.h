// The pure parts of `cnlab run`: flags to a Job body, sizes and deadlines as people write them, the
// exit code a finished job stands for, and the summary line. No I/O, no clock (now is passed in),
// so all of it is unit-tested (tests/cli/run_options_test.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_reader.h"
#include "cli/output.h"
#include "common/result.h"
#include "common/time.h"

namespace cnlab::cli {

struct RunFlags {
  std::vector<std::string> command;  // SCRIPT_OR_COMMAND and its arguments, as typed
  std::string gpu;
  std::string project;         // "" : the token's default project
  std::string priority_class;  // "" : the server's default (dev)
  std::string deadline;        // "2h" (from now) or RFC 3339
  std::string estimate;        // "45m"
  std::vector<std::string> env;  // K=V
  std::string name;            // "" : from the script's name
  bool checkpointable = false;
  std::string cpu;     // "4", "0.5" (cores) or "500m"; "" : none asked (spec.cpu_milli 0)
  std::string memory;  // "16Gi"; "" : none asked (spec.memory_mib 0)
};

// The workspace a job runs in, once uploaded.
struct WorkspaceRef {
  std::string digest;  // "sha256:<hex>"
  int64_t size_bytes = 0;
};

// "1Gi", "512Mi", "64Ki", "2G", "100M", "4096" (bytes), any case, with an optional "B".
// Zero and negative sizes are refused. `field` names the flag in the error.
Result<int64_t> parse_byte_size(std::string_view text, std::string_view field);
// Host CPU as Kubernetes writes it: "4" or "0.5" cores, or "500m" millicores; whole millicores,
// more than 0. `field` names the flag in the error.
Result<int64_t> parse_cpu_milli(std::string_view text, std::string_view field);
// `cnlab run`'s words from SCRIPT_OR_COMMAND on: until a `--`, a word naming one of `values`
// (`--gpu h100-25` or `--gpu=h100-25`) or `switches` (`--detach`) is taken out and handed to its
// setter; what is left, with everything after the first `--` after SCRIPT_OR_COMMAND, is the job's
// command (a leading `--` is dropped, and then no word is taken). Error: kInvalidArgument naming a value option that ends the
// words without its value.
Result<std::vector<std::string>> take_trailing_flags(
    const std::vector<std::string>& words,
    const std::map<std::string, std::function<void(const std::string&)>>& values,
    const std::map<std::string, std::function<void()>>& switches);

// format_bytes is output.h's (one formatting of sizes across the CLI).

// `--deadline`: a duration from now ("2h", "1d12h") or a time ("2026-12-01T18:00Z",
// "2026-12-01T18:00:00+01:00"; seconds may be left out). Refuses times not after `now`.
Result<Time> parse_deadline(std::string_view text, Time now);

// The argv the job runs: a `.py` script runs with python3, anything else as given.
std::vector<std::string> job_command(const std::vector<std::string>& words);
// The job's requested name: `--name`, else the script's or command's base name without its
// extension, made a valid name ("Train_v2.py" -> "train-v2"); "" when nothing usable is left.
std::string job_name(const RunFlags& flags);

// The body of POST /v1/jobs. Errors name the flag (`--env "X"`, `--deadline "..."`).
Result<Json> job_body(const RunFlags& flags, const WorkspaceRef* workspace, Time now);

// The exit code `cnlab run` ends with for a finished job (its status object): the job's exit code,
// 128+N when a signal N ended it, 130 when this command cancelled it (Ctrl-C), and 125 when it
// never ran (failed or cancelled before its process started).
int exit_code_for_job(const Json& status, bool cancelled_here);

// GPU time of a finished job in seconds: blocks/100 x wall time, summed over its GPUs.
double gpu_seconds(const Json& status, double wall_seconds);
// Wall time of a finished job: finished_at - started_at (0 when either is missing).
double wall_seconds(const Json& status);

// "job train-6f3ae726 Succeeded in 12s on node dev (h100 gpu0, 25 blocks) — GPU time 3.0s (25 blocks
// × 12s)". `models` maps "node/gpu index" to a model name when known ("" leaves the model out).
std::string summary_line(const Json& job, const std::function<std::string(const std::string&, int)>& model_of);

// "12.4s", "3m05s", "2h01m".
std::string format_seconds(double seconds);

}  // namespace cnlab::cli
