// CNLab's generic job trace: one job per row, for workloads that do not come from openb.
//
//   submit_time,duration,num_gpus[,gpu_share,model,project,class,deadline]
//
// Times are seconds (decimals allowed). The bracketed columns may be absent from the header or
// empty in a row. gpu_share is a fraction 0 < s <= 1 of one GPU and only makes sense with
// num_gpus == 1; empty means whole GPUs. deadline is an absolute time in seconds.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"

namespace cnlab::sim {

// The most GPUs one generic job may ask for (it may span nodes when gang-placed).
inline constexpr int kMaxGenericJobGpus = 1024;

struct GenericJob {
  int line = 0;             // the row's line in its file, for later error messages
  double submit_time = 0;   // seconds, >= 0
  double duration = 0;      // seconds, > 0
  int num_gpus = 0;         // 0..kMaxGenericJobGpus
  double gpu_share = 1.0;   // of one GPU, in (0, 1]; < 1 only when num_gpus == 1
  std::string model;        // empty = any model
  std::string project;
  std::string job_class;    // the `class` column
  std::optional<double> deadline;  // absolute seconds, >= submit_time
};

// Errors name FILE:LINE:COLUMN, the offending text and what is allowed.
Result<std::vector<GenericJob>> parse_generic_jobs(std::string_view text, std::string file_label);
Result<std::vector<GenericJob>> load_generic_jobs(const std::string& path);

}  // namespace cnlab::sim
