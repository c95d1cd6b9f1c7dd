// A Job: what a user asked to run (spec) and what became of it (status). Its JSON form is the API's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/json_reader.h"
#include "common/time.h"
#include "model/object_meta.h"
#include "model/slice_request.h"

namespace cnlab::model {

enum class JobPhase : uint8_t { kPending, kRunning, kSucceeded, kFailed, kCancelled };
std::string_view to_string(JobPhase phase);

// One GPU (or MIG instance of it) a job holds on a node.
struct GpuBinding {
  int index = 0;       // the GPU's index on the node
  int blocks = 0;      // 1% blocks held; 100 for a whole GPU, the instance's for a MIG request
  int64_t vram_mib = 0;
  int mig_start = -1;  // the MIG instance (by its first memory slot) the blocks sit in; -1 for none

  bool operator==(const GpuBinding&) const = default;
};

struct NodeBinding {
  std::string node;
  std::vector<GpuBinding> gpus;

  bool operator==(const NodeBinding&) const = default;
};

struct JobSpec {
  std::string project;
  std::string user;
  std::string priority_class = "dev";
  SliceRequest gpu;
  int64_t cpu_milli = 0;   // host CPU, thousandths of a core
  int64_t memory_mib = 0;  // host memory
  std::optional<Time> deadline;                 // wanted completion time
  std::optional<Duration> estimated_duration;   // how long it runs once started
  bool checkpointable = false;                  // can be stopped and resumed from its latest checkpoint
  std::optional<Duration> min_runtime;          // protection from pre-emption; the class's when absent

  bool operator==(const JobSpec&) const = default;
};

struct JobStatus {
  JobPhase phase = JobPhase::kPending;
  Time submitted_at{};
  std::optional<Time> started_at;
  std::optional<Time> last_checkpoint_at;
  std::vector<NodeBinding> placement;  // empty unless running
  std::string message;

  bool operator==(const JobStatus&) const = default;
};

struct Job {
  ObjectMeta meta;
  JobSpec spec;
  JobStatus status;

  bool operator==(const Job&) const = default;
};

Json to_json(const Job& job);
// Decodes and validates; the error names the JSON path of the first bad field.
Result<Job> job_from_json(const Json& json);

}  // namespace cnlab::model
