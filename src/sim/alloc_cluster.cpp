#include "sim/alloc_cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace cnlab::sim {

Result<AllocCluster> AllocCluster::build(std::span<const OpenbNode> nodes) {
  AllocCluster c;
  size_t n = nodes.size();
  c.names_.reserve(n);
  c.cpu_capacity_.resize(n);
  c.memory_capacity_.resize(n);
  c.gpu_count_.resize(n);
  c.model_.resize(n);
  int max_gpus = 0;
  for (size_t i = 0; i < n; ++i) {
    const OpenbNode& node = nodes[i];
    if (node.gpu < 0 || node.gpu > kMaxGpusPerNode) {
      return Error::invalid_argument(fmt::format("node {}: gpu", node.sn), std::to_string(node.gpu),
                                     fmt::format("gpu must be 0..{}", kMaxGpusPerNode));
    }
    if (node.cpu_milli < 0 || node.cpu_milli > kMaxResourceValue || node.memory_mib < 0 ||
        node.memory_mib > kMaxResourceValue) {
      return Error::invalid_argument(fmt::format("node {}", node.sn),
                                     fmt::format("{},{}", node.cpu_milli, node.memory_mib),
                                     fmt::format("cpu_milli and memory_mib must be 0..{}", kMaxResourceValue));
    }
    c.names_.push_back(node.sn);
    c.cpu_capacity_[i] = static_cast<int32_t>(node.cpu_milli);
    c.memory_capacity_[i] = static_cast<int32_t>(node.memory_mib);
    c.gpu_count_[i] = static_cast<int8_t>(node.gpu);
    c.model_[i] = -1;
    if (node.gpu > 0) {
      auto it = std::find(c.model_names_.begin(), c.model_names_.end(), node.model);
      if (it == c.model_names_.end()) {
        if (static_cast<int>(c.model_names_.size()) == kMaxModels) {
          return Error::invalid_argument(fmt::format("node {}: model", node.sn), node.model,
                                         fmt::format("a cluster may have at most {} GPU models", kMaxModels));
        }
        it = c.model_names_.insert(c.model_names_.end(), node.model);
      }
      c.model_[i] = static_cast<int8_t>(it - c.model_names_.begin());
    }
    max_gpus = std::max(max_gpus, node.gpu);
    c.gpu_capacity_total_ += int64_t{node.gpu} * kGpuMilli;
  }
  c.stride_ = static_cast<size_t>(max_gpus);
  c.cpu_free_.resize(n);
  c.memory_free_.resize(n);
  c.fully_free_.resize(n);
  c.max_gpu_free_.resize(n);
  c.gpu_free_.resize(n * c.stride_);
  c.gpu_free_total_.resize(n);
  c.rank_.resize(n);
  c.version_.resize(n);
  std::vector<uint32_t> identity(n);
  for (size_t i = 0; i < n; ++i) identity[i] = static_cast<uint32_t>(i);
  c.reset(identity);
  return c;
}

ModelMask AllocCluster::model_mask(std::span<const std::string> spec) const {
  if (spec.empty()) return kAnyModel;
  ModelMask mask = 0;
  for (const auto& name : spec) {
    auto it = std::find(model_names_.begin(), model_names_.end(), name);
    if (it != model_names_.end()) mask |= ModelMask{1} << (it - model_names_.begin());
  }
  return mask == 0 ? kNoClusterModel : mask;
}

bool AllocCluster::fits(const Pod& pod, NodeIndex n) const {
  if (pod.cpu_milli > cpu_free_[n] || pod.memory_mib > memory_free_[n]) return false;
  switch (pod.kind()) {
    case PodKind::kCpuOnly: return true;
    case PodKind::kSharing: return model_allowed(pod.allowed_models, n) && max_gpu_free_[n] >= pod.gpu_milli;
    case PodKind::kWholeGpu: return model_allowed(pod.allowed_models, n) && fully_free_[n] >= pod.num_gpu;
  }
  return false;
}

void AllocCluster::reset(std::span<const uint32_t> ranks) {
  CNLAB_CHECK(ranks.size() == node_count());
  gpu_allocated_total_ = 0;
  for (size_t i = 0; i < node_count(); ++i) {
    auto n = static_cast<NodeIndex>(i);
    cpu_free_[n] = cpu_capacity_[n];
    memory_free_[n] = memory_capacity_[n];
    std::fill_n(gpu_free_.begin() + static_cast<ptrdiff_t>(i * stride_), gpu_count_[n], int16_t{kGpuMilli});
    rank_[n] = ranks[i];
    version_[n] = 0;
    refresh_gpu_summary(n);
  }
}

void AllocCluster::refresh_gpu_summary(NodeIndex n) {
  int total = 0, full = 0, max_free = 0;
  for (int16_t free : gpu_free(n)) {
    total += free;
    full += free == kGpuMilli;
    max_free = std::max<int>(max_free, free);
  }
  gpu_free_total_[n] = total;
  fully_free_[n] = static_cast<int8_t>(full);
  max_gpu_free_[n] = static_cast<int16_t>(max_free);
}

Status AllocCluster::apply(const Pod& pod, const Choice& choice) {
  NodeIndex n = choice.node;
  auto bad = [&](std::string why) {
    return Error::internal(fmt::format("policy chose node {} GPUs {:#x} for a pod (cpu {}, memory {}, {}x{} GPU): {}",
                                       n, choice.gpus, pod.cpu_milli, pod.memory_mib, pod.num_gpu,
                                       pod.gpu_milli, why));
  };
  if (n >= node_count()) return bad("no such node");
  if (!fits(pod, n)) return bad("the pod does not fit that node");
  if (choice.gpus >> gpu_count_[n] != 0) return bad("a GPU index is beyond the node's GPUs");
  if (std::popcount(choice.gpus) != pod.num_gpu) return bad("the number of GPUs differs from num_gpu");
  int16_t* free = gpu_free_.data() + size_t{n} * stride_;
  for (int g = 0; g < gpu_count_[n]; ++g) {
    if (((choice.gpus >> g) & 1) && free[g] < pod.gpu_milli) return bad(fmt::format("GPU {} lacks free milli", g));
  }
  cpu_free_[n] -= pod.cpu_milli;
  memory_free_[n] -= pod.memory_mib;
  for (int g = 0; g < gpu_count_[n]; ++g) {
    if ((choice.gpus >> g) & 1) free[g] = static_cast<int16_t>(free[g] - pod.gpu_milli);
  }
  gpu_allocated_total_ += pod.gpu_request();
  ++version_[n];
  refresh_gpu_summary(n);
  return Status::ok();
}

void AllocCluster::release(const Pod& pod, const Choice& choice) {
  NodeIndex n = choice.node;
  int16_t* free = gpu_free_.data() + size_t{n} * stride_;
  cpu_free_[n] += pod.cpu_milli;
  memory_free_[n] += pod.memory_mib;
  for (int g = 0; g < gpu_count_[n]; ++g) {
    if ((choice.gpus >> g) & 1) free[g] = static_cast<int16_t>(free[g] + pod.gpu_milli);
  }
  gpu_allocated_total_ -= pod.gpu_request();
  ++version_[n];
  refresh_gpu_summary(n);
}

uint32_t lowest_free_gpus(const AllocCluster& cluster, NodeIndex n, int count) {
  uint32_t mask = 0;
  auto free = cluster.gpu_free(n);
  for (size_t g = 0; g < free.size() && count > 0; ++g) {
    if (free[g] == kGpuMilli) {
      mask |= uint32_t{1} << g;
      --count;
    }
  }
  return count == 0 ? mask : 0;
}

int tightest_gpu(const AllocCluster& cluster, NodeIndex n, int milli) {
  int best = -1;
  auto free = cluster.gpu_free(n);
  for (size_t g = 0; g < free.size(); ++g) {
    if (free[g] >= milli && (best < 0 || free[g] < free[static_cast<size_t>(best)])) best = static_cast<int>(g);
  }
  return best;
}

}  // namespace cnlab::sim
