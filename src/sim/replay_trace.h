// The replay experiment's workload: jobs that arrive at a time, ask for GPUs and run for a known
// time. Read from either trace format the simulator knows, told apart by the header line:
//
//  * the openb pod list (`name,...,qos,...,creation_time,deletion_time,scheduled_time`):
//      submit    = creation_time
//      run time  = deletion_time - scheduled_time, or deletion_time - creation_time for pods the
//                  real cluster never scheduled (no scheduled_time)
//      class     = from QoS: Guaranteed -> inference, LS -> production, Burstable -> dev,
//                  BE -> opportunistic (an empty QoS -> dev)
//      project   = "openb" for every pod (the trace names no teams), user "openb"
//      request   = gpu_milli in 1% blocks rounded up (10 milli = 1 block), num_gpu whole GPUs, or
//                  none; gpu_spec -> the catalog models it names
//    A pod without creation_time or deletion_time is refused (not skipped): a replay that
//    silently drops work would compare policies on a different workload than the one given.
//  * CNLab's generic CSV (`submit_time,duration,num_gpus[,gpu_share,model,project,class,deadline]`):
//      class     = a priority class name (inference, production, dev, opportunistic; empty -> dev)
//      project   = the project column ("default" when empty); the user is the project
//      request   = gpu_share * 100 blocks rounded up when < 1, else num_gpus whole GPUs; model by
//                  catalog name (any when empty); generic jobs ask no host CPU or memory
//
// Times become whole seconds: submit and deadline are rounded down, run times up, and a run time of
// zero becomes one second (the scheduler reads an estimate of 0 as "unknown").
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"
#include "model/model.h"
#include "sim/generic_trace.h"
#include "sim/openb_trace.h"

namespace cnlab::sim {

struct ReplayJob {
  std::string name;
  // Project, user, priority class, request, host resources and deadline. The engine fills in
  // estimated_duration (the remaining run time: estimates are perfect) and checkpointable.
  model::JobSpec spec;
  Time submit{};
  Duration run_time{1};  // >= 1 s
};

enum class TraceFormat { kOpenb, kGeneric };

struct ReplayTrace {
  TraceFormat format = TraceFormat::kGeneric;
  std::string label;            // the file as the user named it
  std::vector<ReplayJob> jobs;  // by submit time; equal times keep file order
  size_t unscheduled = 0;       // openb pods without scheduled_time (run time from creation)
  size_t zero_run_time = 0;     // jobs whose run time was 0 and became 1 s
};

// Seconds since the trace's time 0 as a Time (the replay's clock starts at the Unix epoch).
inline Time trace_time(int64_t seconds) { return Time{Duration{seconds}}; }
inline int64_t trace_seconds(Time t) { return t.time_since_epoch().count(); }

// The openb QoS -> priority class mapping described above; an error for any other value.
Result<std::string> class_of_qos(std::string_view qos, std::string_view field);

// Translations of already parsed rows. Errors name the file (and line or pod) and the value.
Result<ReplayTrace> replay_trace_from_openb(const std::vector<OpenbPod>& pods, std::string label);
Result<ReplayTrace> replay_trace_from_generic(const std::vector<GenericJob>& jobs, std::string label);

// Detects the format from the header and parses; the error lists both formats' headers when the
// header is neither.
Result<ReplayTrace> parse_replay_trace(std::string_view text, std::string label);
Result<ReplayTrace> load_replay_trace(const std::string& path);

}  // namespace cnlab::sim
