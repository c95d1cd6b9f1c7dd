// An upper bound on the GPU allocation that any policy can reach on one run of the allocation
// experiment, given only the experiment's rule that a pod fails when it fits nowhere (so a policy
// can choose where a pod goes but not refuse one that fits).
//
// It rests on "hole makers": pods of one GPU size s > 500 milli that accept the same models. Each
// one placed leaves 1000 - s on its GPU that only pods of at most 1000 - s can use. Let t be the
// first hole maker that fails.
//  - Every hole maker before t was placed, so at the end at least (1000 - s) x (their number) minus
//    the milli of every small enough pod of the whole run is free.
//  - When t fails, no node has a GPU with s free for t's CPU, memory and models; capacity only
//    shrinks, so no later pod asking at least as much of all of them fits either. The allocation
//    is at most what arrived before t plus every later pod that might still fit.
// A policy picks t only by how it packs, so the allocation is at most the best over every possible
// t of the smaller of the two; and that for every kind of hole maker (the smallest bound is kept).
#pragma once

#include <cstdint>
#include <span>

#include "sim/alloc_workload.h"

namespace cnlab::sim {

struct AllocationCeiling {
  int64_t gpu_milli = 0;   // the bound, in allocated GPU milli at the end of the run
  int32_t hole_maker = 0;  // the size s that gave it (0 when no size bounds below the capacity)
};

AllocationCeiling allocation_ceiling(std::span<const Pod> pods, std::span<const uint32_t> order, int64_t gpu_capacity);

}  // namespace cnlab::sim
