#include "sim/openb_trace.h"

#include <fmt/format.h>

#include <unordered_set>

#include "sim/csv_reader.h"

namespace cnlab::sim {
namespace {

enum NodeColumn : size_t { kSn, kNodeCpu, kNodeMemory, kGpu, kModel };
enum PodColumn : size_t {
  kName,
  kPodCpu,
  kPodMemory,
  kNumGpu,
  kGpuMilliColumn,
  kGpuSpec,
  kQos,
  kPhase,
  kCreation,
  kDeletion,
  kScheduled
};

// Seconds since the trace's start; generous, but keeps arithmetic on them far from overflow.
constexpr int64_t kMaxTime = int64_t{1} << 40;

}  // namespace

std::string join_gpu_spec(const std::vector<std::string>& spec) {
  std::string out;
  for (const auto& part : spec) {
    if (!out.empty()) out += '|';
    out += part;
  }
  return out;
}

Result<std::vector<OpenbNode>> parse_openb_nodes(std::string_view text, std::string file_label) {
  CsvReader csv(text, std::move(file_label));
  auto header = csv.read_header({{"sn"}, {"cpu_milli"}, {"memory_mib"}, {"gpu"}, {"model"}});
  if (!header) return header.error();
  std::vector<OpenbNode> nodes;
  std::unordered_set<std::string> seen;
  while (csv.next_row()) {
    if (auto width = csv.check_width(); !width) return width.error();
    OpenbNode node;
    node.sn = std::string(csv.cell(kSn));
    if (node.sn.empty()) return csv.bad(kSn, "sn must not be empty");
    if (!seen.insert(node.sn).second) return csv.bad(kSn, "sn must be unique; this node appears twice");
    auto cpu = csv.integer(kNodeCpu, 0, kMaxResourceValue);
    if (!cpu) return cpu.error();
    auto memory = csv.integer(kNodeMemory, 0, kMaxResourceValue);
    if (!memory) return memory.error();
    auto gpu = csv.integer(kGpu, 0, kMaxGpusPerNode);
    if (!gpu) return gpu.error();
    node.cpu_milli = *cpu;
    node.memory_mib = *memory;
    node.gpu = static_cast<int>(*gpu);
    node.model = std::string(csv.cell(kModel));
    if (node.gpu > 0 && node.model.empty()) return csv.bad(kModel, "model must name the GPU model when gpu > 0");
    if (node.model.find('|') != std::string::npos) return csv.bad(kModel, "model must not contain '|'");
    nodes.push_back(std::move(node));
  }
  return nodes;
}

Result<std::vector<OpenbNode>> load_openb_nodes(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return parse_openb_nodes(*text, path);
}

Result<std::vector<OpenbPod>> parse_openb_pods(std::string_view text, std::string file_label) {
  CsvReader csv(text, std::move(file_label));
  auto header = csv.read_header({{"name"},
                                 {"cpu_milli"},
                                 {"memory_mib"},
                                 {"num_gpu"},
                                 {"gpu_milli"},
                                 {"gpu_spec", false},
                                 {"qos", false},
                                 {"pod_phase", false},
                                 {"creation_time", false},
                                 {"deletion_time", false},
                                 {"scheduled_time", false}});
  if (!header) return header.error();
  std::vector<OpenbPod> pods;
  std::unordered_set<std::string> seen;
  while (csv.next_row()) {
    if (auto width = csv.check_width(); !width) return width.error();
    OpenbPod pod;
    pod.name = std::string(csv.cell(kName));
    if (pod.name.empty()) return csv.bad(kName, "name must not be empty");
    if (!seen.insert(pod.name).second) return csv.bad(kName, "name must be unique; this pod appears twice");
    auto cpu = csv.integer(kPodCpu, 0, kMaxResourceValue);
    if (!cpu) return cpu.error();
    auto memory = csv.integer(kPodMemory, 0, kMaxResourceValue);
    if (!memory) return memory.error();
    auto num_gpu = csv.integer(kNumGpu, 0, kMaxGpusPerNode);
    if (!num_gpu) return num_gpu.error();
    auto gpu_milli = csv.integer(kGpuMilliColumn, 0, kGpuMilli);
    if (!gpu_milli) return gpu_milli.error();
    pod.cpu_milli = *cpu;
    pod.memory_mib = *memory;
    pod.num_gpu = static_cast<int>(*num_gpu);
    pod.gpu_milli = static_cast<int>(*gpu_milli);
    if (pod.num_gpu == 0 && pod.gpu_milli != 0) {
      return csv.bad(kGpuMilliColumn, "gpu_milli must be 0 when num_gpu is 0");
    }
    if (pod.num_gpu == 1 && pod.gpu_milli == 0) {
      return csv.bad(kGpuMilliColumn, "gpu_milli must be 1..1000 when num_gpu is 1");
    }
    if (pod.num_gpu > 1 && pod.gpu_milli != kGpuMilli) {
      return csv.bad(kGpuMilliColumn, "gpu_milli must be 1000 when num_gpu > 1 (only one GPU can be shared)");
    }
    for (std::string_view part : split(csv.cell(kGpuSpec), '|')) {
      part = trim(part);
      if (!part.empty()) pod.gpu_spec.emplace_back(part);
    }
    pod.qos = std::string(csv.cell(kQos));
    pod.pod_phase = std::string(csv.cell(kPhase));
    auto creation = csv.optional_integer(kCreation, 0, kMaxTime);
    if (!creation) return creation.error();
    auto deletion = csv.optional_integer(kDeletion, 0, kMaxTime);
    if (!deletion) return deletion.error();
    auto scheduled = csv.optional_integer(kScheduled, 0, kMaxTime);
    if (!scheduled) return scheduled.error();
    pod.creation_time = *creation;
    pod.deletion_time = *deletion;
    pod.scheduled_time = *scheduled;
    pods.push_back(std::move(pod));
  }
  return pods;
}

Result<std::vector<OpenbPod>> load_openb_pods(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return parse_openb_pods(*text, path);
}

}  // namespace cnlab::sim
