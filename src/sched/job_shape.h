// A job's request resolved once per cycle into what the placement search reads. Private to src/sched.
#pragma once

#include <cstdint>

#include "model/model.h"
#include "sched/node_traits.h"

namespace cnlab::sched {

struct JobShape {
  model::SliceKind kind = model::SliceKind::kWhole;
  model::ModelMask models = 0;  // 0 = any
  int blocks = model::kBlocksPerGpu;  // per GPU
  int gpu_count = 1;
  int mig_profile = -1;
  int64_t vram_mib = -1;  // -1: the blocks' share of the partition's memory
  int64_t cpu_milli = 0, memory_mib = 0;  // host resources for the whole job
  NodeTraits node_traits = 0;  // what every node it goes on must have: a resume's needs, or a mover's target's

  static JobShape of(const model::JobSpec& spec) {
    JobShape s;
    s.kind = spec.gpu.kind;
    s.models = spec.gpu.models;
    s.blocks = spec.gpu.blocks;
    s.gpu_count = spec.gpu.gpu_count;
    s.mig_profile = spec.gpu.mig_profile;
    s.vram_mib = spec.gpu.vram_mib.value_or(-1);
    s.cpu_milli = spec.cpu_milli;
    s.memory_mib = spec.memory_mib;
    return s;
  }
  model::ModelId mig_model() const { return static_cast<model::ModelId>(__builtin_ctz(models)); }
  int total_blocks() const { return blocks * gpu_count; }
  bool operator==(const JobShape&) const = default;
};

struct JobShapeHash {
  size_t operator()(const JobShape& s) const {
    size_t h = static_cast<size_t>(s.kind) * 0x9E3779B97F4A7C15ull;
    for (int64_t v : {int64_t{s.models}, int64_t{s.blocks}, int64_t{s.gpu_count}, int64_t{s.mig_profile}, s.vram_mib,
                      s.cpu_milli, s.memory_mib, int64_t{s.node_traits}}) {
      h = (h ^ static_cast<size_t>(v)) * 0x100000001B3ull;  // FNV-1a style, over whole fields
    }
    return h;
  }
};

}  // namespace cnlab::sched
