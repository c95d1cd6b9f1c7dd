// Loaders for the Alibaba "openb" GPU-sharing trace (USENIX ATC'23, FGD): a node list and a pod
// list. Every column is kept, including those the allocation experiment ignores (qos, phase and
// times feed the replay experiment).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"

namespace cnlab::sim {

// The most GPUs one node may have, and the most one pod may ask for. The published cluster has at
// most 8 per node; 16 leaves room for newer machines while a node's GPUs still fit a 16-bit mask.
inline constexpr int kMaxGpusPerNode = 16;
// One GPU is 1000 milli-GPUs in the openb trace.
inline constexpr int kGpuMilli = 1000;
// CPU milli and memory MiB are held in 32-bit fields by the engine.
inline constexpr int64_t kMaxResourceValue = 2'000'000'000;

struct OpenbNode {
  std::string sn;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpu = 0;        // number of GPUs, 0..kMaxGpusPerNode
  std::string model;  // GPU model; empty only when gpu == 0
};

struct OpenbPod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  // Milli of each requested GPU: 0 when num_gpu == 0, 1..1000 when num_gpu == 1, 1000 when
  // num_gpu > 1 (the trace never shares a slice of several GPUs).
  int gpu_milli = 0;
  std::vector<std::string> gpu_spec;  // allowed models; empty = any; empty parts already dropped
  std::string qos;
  std::string pod_phase;
  std::optional<int64_t> creation_time;   // seconds
  std::optional<int64_t> deletion_time;   // seconds
  std::optional<int64_t> scheduled_time;  // seconds; absent for pods never scheduled
};

// `sn,cpu_milli,memory_mib,gpu,model` (columns in any order). Errors name FILE:LINE:COLUMN, the
// offending text and what is allowed. `file_label` is how errors name the file.
Result<std::vector<OpenbNode>> parse_openb_nodes(std::string_view text, std::string file_label);
Result<std::vector<OpenbNode>> load_openb_nodes(const std::string& path);

// `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,
// deletion_time,scheduled_time]` (columns in any order; the bracketed ones may be absent or empty).
Result<std::vector<OpenbPod>> parse_openb_pods(std::string_view text, std::string file_label);
Result<std::vector<OpenbPod>> load_openb_pods(const std::string& path);

// "V100M16|V100M32", the spec as one key (parts in file order, empty parts dropped).
std::string join_gpu_spec(const std::vector<std::string>& spec);

}  // namespace cnlab::sim
