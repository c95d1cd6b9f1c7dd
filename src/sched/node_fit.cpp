#include "sched/node_fit.h"

#include <array>

namespace cnlab::sched {

void NodeFit::load(uint32_t node) {
  const ClusterState& state = state_;
  const JobShape& shape = shape_;
  parts_.clear();
  free_slots_ = false;
  const NodeState& n = state.node(node);
  cpu_ = n.cpu_free;
  mem_ = n.mem_free;
  for (uint32_t g = n.gpu_begin; g < n.gpu_end; ++g) {
    const GpuState& gpu = state.gpu(g);
    if (!gpu.healthy || !model::mask_allows(shape.models, gpu.model)) continue;
    if (shape.kind == model::SliceKind::kMig && gpu.model != shape.mig_model()) continue;
    if (gpu.whole != kNone) {
      add(gpu.whole);
    } else {
      if (shape.kind == model::SliceKind::kMig && state.mig_gpu(gpu.mig).layout.first_fit(shape.mig_profile) >= 0) {
        free_slots_ = true;
      }
      for (uint32_t p : state.mig_gpu(gpu.mig).partitions) add(p);
    }
  }
}

void NodeFit::take(const Allocation& a) {
  cpu_ += a.cpu;
  mem_ += a.mem;
  for (const PartUse& use : state_.parts(a)) {
    for (Part& p : parts_) {
      if (p.partition == use.partition) {
        p.blocks += use.blocks;
        p.mem += use.mem;
        p.jobs -= 1;
      }
    }
  }
}

bool NodeFit::fits() const {
  if (cpu_ < shape_.cpu_milli || mem_ < shape_.memory_mib) return false;
  switch (shape_.kind) {
    case model::SliceKind::kNone: return true;
    case model::SliceKind::kBlocks:
      for (const Part& p : parts_) {
        const PartitionState& ps = state_.partition(p.partition);
        int64_t need = shape_.vram_mib >= 0 ? shape_.vram_mib : state_.default_mem(ps, shape_.blocks);
        if (!(ps.exclusive && p.jobs > 0) && p.blocks >= shape_.blocks && p.mem >= need) return true;
      }
      return false;
    case model::SliceKind::kWhole: {
      std::array<int, model::kMaxModels> free{};
      for (const Part& p : parts_) {
        const PartitionState& ps = state_.partition(p.partition);
        if (ps.mig_start < 0 && p.jobs == 0 && ++free[ps.model] >= shape_.gpu_count) return true;
      }
      return false;
    }
    case model::SliceKind::kMig:
      if (free_slots_) return true;
      for (const Part& p : parts_) {
        const PartitionState& ps = state_.partition(p.partition);
        if (p.jobs > 0) continue;
        if (ps.mig_profile == shape_.mig_profile || (ps.mig_start < 0 && repartition_)) return true;
      }
      return false;
  }
  return false;
}

void NodeFit::add(uint32_t p) {
  const PartitionState& ps = state_.partition(p);
  parts_.push_back({p, ps.free_blocks, ps.free_mem, ps.jobs});
}

}  // namespace cnlab::sched
