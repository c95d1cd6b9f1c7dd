// The compute-share control law: how fast each tenant on one GPU may launch kernels next period,
// from how much of the GPU each actually used last period. Pure (no clock, no I/O): the agent runs it
// for every tenant of its node, the library's standalone controller for its own tenant, and the
// tests and benchmarks feed it directly.
//
// The law, per GPU, every period:
//  1. Targets. Among the tenants that launched something this period, each gets its share of the
//     GPU, except that a tenant limited by its own demand (wants_more below is false) keeps what it
//     uses when that is less, and the rest goes to the others in proportion to their shares
//     (water-filling: work-conserving). A hard share's target is the share itself.
//  2. Measure. Each tenant's busy fraction (the part of the period the GPU ran its kernels, as the
//     device reports it) and its launch rate.
//  3. Correct. When the GPU is contended (the busy fractions add up to kSaturated or more), a tenant
//     above its target is paced to launches/s = (what it launched) x (target / busy), the
//     correction damped to at most halving or doubling per period; a paced tenant below its target is
//     let faster by the same rule. When the GPU has room (below kRoomy), paced tenants are let 25%
//     faster each period, and unpaced once their allowance is four times what they use — unless
//     hard, in which case they stay held at their target. In between, nothing changes.
//
// Why not a token bucket: a bucket charges each launch a fixed cost (one token, or the grid's size),
// so a tenant running long kernels gets more of the GPU than one running short ones at the same
// share, and the split follows kernel shapes rather than the configuration (HAMi-core's 30/70 caps
// measured near 46/54). Here the cost of a launch is never assumed: the rate is corrected each
// period against GPU time measured by the device, so short and long kernels converge to the same
// split, and a tenant alone is never held back unless its share is hard.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cnlab::vgpu {

// The GPU is contended when its tenants' busy fractions add up to kSaturated or more, and has room
// below kRoomy; in between, paces are held as they are (hysteresis, so that a pace is not dropped
// and set again every other period). Tenants of tiny kernels that synchronise often keep a GPU at
// 85-95% while still competing for it, so "contended" cannot wait for 100%.
inline constexpr double kSaturated = 0.85;
inline constexpr double kRoomy = 0.75;

struct ShareInput {
  double share = 1.0;         // configured fraction of the GPU, (0, 1]
  bool hard = false;          // hold the share even when the GPU is idle
  double busy = 0;            // fraction of the period the GPU ran this tenant's kernels, [0, 1]
  uint64_t launches = 0;      // launches this period
  uint64_t interval_ns = 0;   // current pacing: ns between launches on average; 0 for none
  // Fractions of the period its threads spent waiting for the GPU (in synchronize calls: its own
  // kernels and any queued ahead of them) and held back by its pacing; they may exceed 1 (threads).
  double waiting = 0;
  double paced = 0;
};

// Whether a tenant wants more of the GPU than it gets: its pace holds it back, or it waits in
// synchronize calls for longer than its own kernels ran (it queues behind others' work). One that
// does neither is limited by its own demand: it keeps what it uses and the rest of its share goes
// to those who want it.
inline constexpr double kWantsMore = 0.05;
bool wants_more(const ShareInput& t);

// Writes the new pacing for each of the `count` tenants into `intervals` (same order): ns between
// launches, 0 for none. `period_ns` is the length of the period the inputs were measured over.
// Libc only (no allocation): the interception library runs it too.
void next_intervals(const ShareInput* tenants, size_t count, uint64_t period_ns, uint64_t* intervals);

}  // namespace cnlab::vgpu
